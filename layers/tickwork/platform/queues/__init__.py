"""The queue port and its adapters: SQS in AWS, an in-process queue locally."""

from tickwork.platform.queues.port import OutgoingMessage, QueuePort, VisibilityChange, decode_body

__all__ = ["OutgoingMessage", "QueuePort", "VisibilityChange", "decode_body"]
