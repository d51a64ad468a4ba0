"""Recurring schedules: RRULE recurrence and the schedules that own their occurrences."""
