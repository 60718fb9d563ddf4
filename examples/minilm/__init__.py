"""all-MiniLM-L6-v2 sentence embeddings: a plain-torch BERT, its ONNX export and a served
tokenize -> encode (ONNX Runtime) -> pool pipeline."""
