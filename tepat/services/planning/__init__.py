"""Planning: turning reminders into the messages of the coming window."""
