"""Tepat's HTTP API (FastAPI): thin routes over ``tepat.services``; see ``api.app.create_app``."""
