package import RoundupStreams

/// One webhook stream entry as the worker reads it (decoded by `WebhookEvent`).
package typealias StreamEntry = StreamDelivery
