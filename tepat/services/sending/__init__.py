"""Sending: claiming due messages, handing them to their channel, recording the answers."""
