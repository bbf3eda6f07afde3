import RoundupStreams
import RoundupWorker

extension WebhookProcessor {
    /// Webhook stream entries as the worker's consumer hands them over: each decoded (`decode`). An entry that does not
    /// decode throws (the consumer would have dead-lettered it; no test here means to send one).
    func process(entries: [StreamDelivery]) async throws -> BatchOutcome {
        var batch: [Delivered<WebhookReading>] = []
        for entry in entries { batch.append(Delivered(id: entry.id, message: try Self.decode(entry))) }
        return await process(batch)
    }
}
