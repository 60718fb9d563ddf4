"""all-MiniLM-L6-v2 sentence embeddings, the library behind functions/embeddings.py and
model_repository/: a plain-torch BERT (the reference), its ONNX and .pt2 exports, and the
tokenize -> encode -> pool steps."""
