"""Deployments: archives pushed to a running server, validated, stored and served."""
