import Foundation
import NIOConcurrencyHelpers
import NIOCore
public import RoundupRedis

/// `StreamDriver` on Redis streams: XREADGROUP on a dedicated connection (a blocking read must not hold up other
/// commands), XPENDING/XCLAIM to reclaim, XCLAIM … JUSTID as the lease heartbeat, XACK+XDEL, an errors hash, and a
/// script that moves an entry to the dead-letter stream in one step.
public final class RedisStreamDriver: StreamDriver {
    public struct DeadLetters: Sendable {
        public var stream: String
        /// Dead letters kept at most, and their age bound.
        public var maxCount: Int
        public var maxAge: Duration

        public init(stream: String, maxCount: Int, maxAge: Duration) {
            self.stream = stream
            self.maxCount = maxCount
            self.maxAge = maxAge
        }
    }

    public let stream: String
    public let group: String
    public let consumer: String
    /// Hash: entry id → its last recorded error, and `<id>:attempts` → its last attempts (`StreamAttempt`); nil when
    /// the stream records none.
    public let errors: String?
    public let deadLetters: DeadLetters?
    /// What each producer has waiting in the stream, lowered as entries leave it (nil: not kept).
    public let load: StreamLoad?
    let redis: RedisClient
    private let reader = NIOLockedValueBox<RedisConnection?>(nil)

    public init(
        redis: RedisClient, stream: String, group: String, consumer: String, errors: String? = nil, deadLetters: DeadLetters? = nil,
        load: StreamLoad? = nil
    ) {
        self.load = load
        self.redis = redis
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.errors = errors
        self.deadLetters = deadLetters
    }

    deinit {
        if let connection = reader.withLockedValue({ $0 }) { connection.close().whenComplete { _ in } }
    }

    public func prepare() async throws {
        if let connection = reader.withLockedValue({ $0 }), connection.isActive { return }
        try await redis.createGroupIfMissing(stream: stream, group: group)
        let connection = try await redis.dedicatedConnection(for: stream).get()
        let previous = reader.withLockedValue { current -> RedisConnection? in
            defer { current = connection }
            return current
        }
        if let previous { previous.close().whenComplete { _ in } }
    }

    public func reset() async {
        let previous = reader.withLockedValue { current -> RedisConnection? in
            defer { current = nil }
            return current
        }
        if let previous { previous.close().whenComplete { _ in } }
    }

    public func read(count: Int, block: Duration?) async throws -> [StreamDelivery] {
        guard let connection = reader.withLockedValue({ $0 }) else { throw RedisClientError(.connectionClosed, "stream reader not connected") }
        var arguments: [RedisArgument] = ["GROUP", RedisArgument(group), RedisArgument(consumer), "COUNT", RedisArgument(count)]
        if let block { arguments += ["BLOCK", RedisArgument(Self.milliseconds(block))] }
        arguments += ["STREAMS", RedisArgument(stream), ">"]
        let timeout = TimeAmount.milliseconds(Int64(Self.milliseconds(block ?? .zero))) + .seconds(5)
        let reply = try await connection.send(RedisCommand("XREADGROUP", arguments), timeout: timeout).get()
        return Self.deliveries(read: reply)
    }

    public func pending(idle: Duration, count: Int) async throws -> [StreamPendingEntry] {
        let reply = try await redis.send(
            RedisCommand(
                "XPENDING",
                [
                    RedisArgument(stream), RedisArgument(group), "IDLE", RedisArgument(Self.milliseconds(idle)), "-", "+", RedisArgument(count),
                ]))
        return (reply.array ?? []).compactMap { item in
            guard let fields = item.array, fields.count >= 4, let id = fields[0].string, let deliveries = fields[3].int else { return nil }
            return StreamPendingEntry(id: id, deliveries: deliveries)
        }
    }

    public func claim(_ ids: [String], idle: Duration) async throws -> [StreamDelivery] {
        guard !ids.isEmpty else { return [] }
        let claimed = try await redis.send(
            RedisCommand(
                "XCLAIM",
                [
                    RedisArgument(stream), RedisArgument(group), RedisArgument(consumer), RedisArgument(Self.milliseconds(idle)),
                ] + ids.map { RedisArgument($0) }))
        // Entries deleted meanwhile come back without fields (or not at all): ack them so they leave the pending list.
        let entries = claimed.streamEntries.filter { !$0.fields.isEmpty }.map { StreamDelivery(id: $0.id, fields: $0.fields) }
        let gone = Set(ids).subtracting(entries.map(\.id))
        if !gone.isEmpty {
            _ = try await redis.send(RedisCommand("XACK", [RedisArgument(stream), RedisArgument(group)] + gone.sorted().map { RedisArgument($0) }))
        }
        return entries
    }

    public func extendLease(_ ids: [String]) async throws {
        guard !ids.isEmpty else { return }
        _ = try await redis.send(
            RedisCommand(
                "XCLAIM", [RedisArgument(stream), RedisArgument(group), RedisArgument(consumer), "0"] + ids.map { RedisArgument($0) } + ["JUSTID"]))
    }

    public func settle(done: [String], failed: [(id: String, recorded: String)], appends: [StreamAppend]) async throws -> Int {
        var commands: [RedisCommand] = []
        if !done.isEmpty, let command = settleWithLoad(done) {
            commands.append(command)
        } else if !done.isEmpty {
            let ids = done.map { RedisArgument($0) }
            commands.append(RedisCommand("XACK", [RedisArgument(stream), RedisArgument(group)] + ids))
            // One consumer group reads each stream: once it has acked an entry nobody needs it.
            commands.append(RedisCommand("XDEL", [RedisArgument(stream)] + ids))
            if let errors { commands.append(RedisCommand("HDEL", [RedisArgument(errors)] + StreamAttempt.fieldsToForget(done))) }
        }
        // Acking and deleting only free memory, so a Redis at its maxmemory still takes them; what follows may be
        // refused then (a push to wake the apps, an entry's last error), and its refusal must not stop the draining.
        let essential = commands.count
        commands += appends.map(\.command)
        if let errors, !failed.isEmpty {
            let now = Int(Date().timeIntervalSince1970 * 1000)
            for (id, recorded) in failed {
                commands.append(StreamAttempt.recordCommand(errors: errors, id: id, recorded: recorded, consumer: consumer, now: now))
            }
        }
        guard !commands.isEmpty else { return 0 }
        let replies = try await redis.pipeline(commands)
        if let failure = replies.prefix(essential).first(where: \.isError) {
            throw RedisClientError.reply(failure.errorReply ?? "\(failure)", answering: "settling batch")
        }
        return replies.dropFirst(essential).filter(\.isError).count
    }

    /// The one command that acknowledges and deletes `ids` and lowers the load by them, for a stream that keeps one.
    func settleWithLoad(_ ids: [String]) -> RedisCommand? {
        guard let load else { return nil }
        return StreamLoad.settle.command(
            keys: [RedisArgument(stream), RedisArgument(load.key), RedisArgument(errors ?? stream + ":errors")],
            arguments: [RedisArgument(group), RedisArgument(load.ownerField), RedisArgument(load.sizeField)] + ids.map { RedisArgument($0) })
    }

    public func recordedErrors(_ ids: [String]) async throws -> [String?] {
        guard let errors, !ids.isEmpty else { return ids.map { _ in nil } }
        let reply = try await redis.send(RedisCommand("HMGET", [RedisArgument(errors)] + ids.map { RedisArgument($0) }))
        let values = reply.array ?? []
        return ids.indices.map { $0 < values.count ? values[$0].string : nil }
    }

    public func deadLetter(_ id: String, deliveries: Int, error: String) async throws -> Int {
        guard let deadLetters else { throw RedisClientError(.server, "stream \(stream) has no dead letters") }
        let now = Int(Date().timeIntervalSince1970 * 1000)
        let oldestKept = max(0, now - Int(deadLetters.maxAge.components.seconds) * 1000)
        return try await redis.evaluate(
            StreamDeadLetter.script,
            keys: [RedisArgument(stream), RedisArgument(deadLetters.stream), RedisArgument(errors ?? stream + ":errors")]
                + (load.map { [RedisArgument($0.key)] } ?? []),
            arguments: [
                RedisArgument(group), RedisArgument(id), RedisArgument(deliveries), RedisArgument(String(error.prefix(500))), RedisArgument(now),
                RedisArgument(deadLetters.maxCount), RedisArgument(String(oldestKept)),
                RedisArgument(StreamAttempt(at: now, consumer: consumer, error: String(error.prefix(500))).line),
                RedisArgument(StreamAttempt.kept),
            ] + (load.map { [RedisArgument($0.ownerField), RedisArgument($0.sizeField)] } ?? [])
        ).int ?? 0
    }

    public func stats() async -> StreamStats? {
        guard let replies = try? await redis.pipeline(statsCommands) else { return nil }
        var (stats, lastDelivered) = stats(from: replies[...])
        if let lastDelivered { stats.oldestWaitingMilliseconds = try? await Self.oldestWaiting(redis: redis, stream: stream, after: lastDelivered) }
        return stats
    }

    /// How many entries wait to be delivered to the group (its lag; where Redis cannot say, the entries not pending,
    /// which holds for a stream whose settled entries are deleted). Nil when Redis could not be asked.
    public func waiting() async -> Int? {
        guard let replies = try? await redis.pipeline(Array(statsCommands.prefix(3))) else { return nil }
        let (stats, _) = stats(from: replies[...])
        if let lag = stats.lag { return lag }
        guard let length = stats.length else { return nil }
        return max(0, length - (stats.pending ?? 0))
    }

    /// The commands `stats` reads (several drivers' are sent in one pipeline by `ShardedStreamDriver`).
    var statsCommands: [RedisCommand] {
        var commands = [
            RedisCommand("XLEN", [RedisArgument(stream)]),
            RedisCommand("XPENDING", [RedisArgument(stream), RedisArgument(group)]),
            RedisCommand("XINFO", ["GROUPS", RedisArgument(stream)]),
        ]
        if let deadLetters { commands.append(RedisCommand("XLEN", [RedisArgument(deadLetters.stream)])) }
        return commands
    }

    /// The figures `statsCommands`' replies give, and the group's last-delivered id (to find the oldest entry waiting).
    func stats(from replies: ArraySlice<RedisValue>) -> (StreamStats, lastDelivered: String?) {
        let replies = Array(replies)
        var stats = StreamStats(length: replies[0].int)
        if let summary = replies[1].array {
            stats.pending = summary.first?.int ?? 0
            // The oldest pending entry's id starts with the milliseconds it was added at.
            if summary.count > 1, let oldest = summary[1].string { stats.oldestPendingMilliseconds = StreamStats.milliseconds(ofID: oldest) }
        }
        var lastDelivered: String?
        for info in replies[2].array ?? [] {
            let map = info.fieldMap
            guard map["name"]?.string == group else { continue }
            stats.lag = map["lag"]?.int
            lastDelivered = map["last-delivered-id"]?.string
        }
        if deadLetters != nil, replies.count > 3 { stats.deadLetters = replies[3].int }
        return (stats, stats.lag == 0 ? nil : lastDelivered)
    }

    /// When the oldest entry not yet delivered to a group was added (ms since 1970): the first entry after the group's
    /// last-delivered id. Nil when none waits.
    public static func oldestWaiting(redis: RedisClient, stream: String, after lastDelivered: String) async throws -> Double? {
        let reply = try await redis.send(RedisCommand("XRANGE", [RedisArgument(stream), RedisArgument("(" + lastDelivered), "+", "COUNT", "1"]))
        return reply.streamEntries.first.flatMap { StreamStats.milliseconds(ofID: $0.id) }
    }

    static func milliseconds(_ duration: Duration) -> Int {
        let parts = duration.components
        return Int(parts.seconds) * 1000 + Int(parts.attoseconds / 1_000_000_000_000_000)
    }

    /// An XREADGROUP reply: `[[stream, [[id, [field, value, …]], …]]]`, or nil on timeout.
    static func deliveries(read reply: RedisValue) -> [StreamDelivery] {
        guard let streams = reply.array else { return [] }
        return streams.flatMap { stream -> [StreamDelivery] in
            guard let pair = stream.array, pair.count == 2 else { return [] }
            return pair[1].streamEntries.map { StreamDelivery(id: $0.id, fields: $0.fields) }
        }
    }
}

extension RedisValue {
    var isError: Bool { errorReply != nil }
}
