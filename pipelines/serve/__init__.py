"""`pencil serve`: a trained run as an online Ray Serve service (command.py; the applications in app.py)."""
