public import RoundupStreams

/// One webhook stream entry as the worker reads it (decoded by `WebhookEvent`).
public typealias StreamEntry = StreamDelivery
