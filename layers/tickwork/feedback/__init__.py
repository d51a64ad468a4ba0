"""Delivery feedback: providers' status callbacks (Twilio, Postmark, SES through SNS),
verified the provider's way, become later states of the attempt that published a row
(`delivery`: delivered, bounced hard or soft, complained, undelivered); hard bounces,
complaints and STOP replies add to the suppression list. `model` holds the values,
`store` the database, one module per provider reads and verifies its callbacks, and
`receive` puts them together for the public endpoint."""
