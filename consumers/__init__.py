"""Consumers: take due batches off the delay queues, decide, send, record; and poll receipts."""
