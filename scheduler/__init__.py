"""Creator jobs: turn reminders into messages at their local instants, and keep them moving."""
