/// What the stream consumer needs from a stream with a consumer group, for one consumer of it: Redis in production
/// (`RedisStreamDriver`), memory in tests (`MemoryStreamDriver`). Every call is about this driver's stream, group and
/// consumer name.
public protocol StreamDriver: Sendable {
    /// Makes sure the group exists and a connection to read on is open; called before reading and after any error.
    func prepare() async throws
    /// Drops the reading connection after an error; the next `prepare` opens another.
    func reset() async

    /// Up to `count` entries never delivered to the group, now delivered to this consumer; waits up to `block` for
    /// the first (nil: answers at once).
    func read(count: Int, block: Duration?) async throws -> [StreamDelivery]

    /// Entries pending with any consumer of the group for at least `idle`, oldest first, at most `count`.
    func pending(idle: Duration, count: Int) async throws -> [StreamPendingEntry]
    /// Takes `ids` over for this consumer if they are still idle for `idle` (counts a delivery). Entries deleted
    /// meanwhile are acknowledged and left out.
    func claim(_ ids: [String], idle: Duration) async throws -> [StreamDelivery]
    /// Resets the idle time of entries this consumer holds, without counting a delivery (its lease heartbeat).
    func extendLease(_ ids: [String]) async throws

    /// Acknowledges and deletes `done` (with their recorded errors), records the errors of `failed`, appends
    /// `appends`. Throws when the acknowledgements were refused; returns how many of the other writes (errors,
    /// appends: bookkeeping a Redis at its maxmemory may refuse) were refused.
    func settle(done: [String], failed: [(id: String, recorded: String)], appends: [StreamAppend]) async throws -> Int
    /// The errors recorded for `ids` (nil where none).
    func recordedErrors(_ ids: [String]) async throws -> [String?]
    /// Moves an entry to the dead letters with `error` (unless an error was recorded for it, which wins), acks and
    /// deletes it; returns how many old dead letters the retention bounds removed.
    func deadLetter(_ id: String, deliveries: Int, error: String) async throws -> Int

    /// The stream's length, pending count, lag and dead letters, for the gauges; nil if not readable now.
    func stats() async -> StreamStats?
}
