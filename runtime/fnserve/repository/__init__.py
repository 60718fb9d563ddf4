"""Model discovery, lifecycle (load / unload) and the registry of served models."""
