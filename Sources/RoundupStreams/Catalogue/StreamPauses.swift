public import Foundation
public import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import RoundupCore
public import RoundupRedis
public import ServiceLifecycle

/// The three streams operators see (`roundupctl queues`), by the names they type (`roundupctl pause webhooks`).
public enum RoundupStream: String, Sendable, CaseIterable, Codable {
    case webhooks, jobs, push

    /// The Redis streams it is kept in: the 64 webhook shards (`WebhookShard`), or the job or the push stream alone.
    public func parts(_ keys: RedisKeys) -> [StreamPart] {
        switch self {
        case .webhooks:
            WebhookShard.all.map { shard in
                StreamPart(
                    label: "webhooks/\(shard.index)", stream: keys.webhookStream(shard), deadLetters: keys.deadLetterStream(shard),
                    errors: keys.webhookErrors(shard), shard: shard)
            }
        case .jobs: [StreamPart(label: "jobs", stream: keys.jobStream, deadLetters: keys.jobDeadLetters, errors: nil, shard: nil)]
        case .push: [StreamPart(label: "push", stream: keys.pushStream, deadLetters: keys.pushDeadLetters, errors: nil, shard: nil)]
        }
    }

    /// The part that holds `id`, an entry or dead letter as the operators' tools name it (`<shard>:<id>` for the
    /// webhook shards, the Redis id alone otherwise), and the id within it.
    public func part(holding id: String, keys: RedisKeys) -> (part: StreamPart, id: String)? {
        let parts = parts(keys)
        if parts.count == 1 { return ShardedEntryID(id) == nil ? (parts[0], id) : nil }
        guard let entry = ShardedEntryID(id), entry.part < parts.count else { return nil }
        return (parts[entry.part], entry.id)
    }

    /// How the operators' tools name entry `id` of `part`.
    public func name(of id: String, in part: StreamPart) -> String {
        part.shard.map { ShardedEntryID(part: $0.index, id: id).description } ?? id
    }

    /// The consumer group that reads it.
    public func group(_ keys: RedisKeys) -> String {
        switch self {
        case .webhooks, .jobs: keys.workerGroup
        case .push: keys.pusherGroup
        }
    }

    /// The fields its messages carry (what a dead letter's replay puts back on the stream).
    public var messageFields: [String] {
        switch self {
        case .webhooks: WebhookEvent.fieldNames
        case .jobs: SyncJobMessage.Field.allCases.map(\.rawValue) + TraceHeaders.Field.allCases.map(\.rawValue)
        case .push: PushRequest.Field.allCases.map(\.rawValue) + TraceHeaders.Field.allCases.map(\.rawValue)
        }
    }
}

/// Operators' pauses, kept in Redis (`RedisKeys.pausedStreams`: stream name → when, ms since 1970) so that every worker
/// and pusher sees them; the ingress does not look: it keeps accepting while a stream is paused.
public struct StreamPauses: Sendable {
    let redis: RedisClient
    let keys: RedisKeys

    public init(redis: RedisClient, keys: RedisKeys) {
        self.redis = redis
        self.keys = keys
    }

    /// Pauses `stream`; returns false when it already was (its first pause time is kept).
    @discardableResult
    public func pause(_ stream: RoundupStream, at date: Date = Date()) async throws -> Bool {
        let since = String(Int(date.timeIntervalSince1970 * 1000))
        let reply = try await redis.send(
            RedisCommand("HSETNX", [RedisArgument(keys.pausedStreams), RedisArgument(stream.rawValue), RedisArgument(since)]))
        return reply.int == 1
    }

    /// Resumes `stream`; returns false when it was not paused.
    @discardableResult
    public func resume(_ stream: RoundupStream) async throws -> Bool {
        try await redis.send(RedisCommand("HDEL", [RedisArgument(keys.pausedStreams), RedisArgument(stream.rawValue)])).int == 1
    }

    /// The command that reads the pauses.
    var read: RedisCommand { RedisCommand("HGETALL", [RedisArgument(keys.pausedStreams)]) }

    /// The paused streams and since when. Unknown names in the hash (a newer version's) are left out.
    public func current() async throws -> [RoundupStream: Date] {
        Self.parse(try await redis.send(read, timeout: .seconds(1)))
    }

    static func parse(_ reply: RedisValue) -> [RoundupStream: Date] {
        var paused: [RoundupStream: Date] = [:]
        for (name, value) in reply.fieldMap {
            guard let stream = RoundupStream(rawValue: name) else { continue }
            let millis = value.string.flatMap(Double.init) ?? 0
            paused[stream] = Date(timeIntervalSince1970: millis / 1000)
        }
        return paused
    }

    // MARK: One account

    /// An account's pause is a field of the same hash (`account:<id>`), read with the streams' in one command.
    public static let accountField = "account:"

    /// Pauses one account: its webhook events are still accepted and kept, but wait in their shard (pending, never
    /// dead-lettered for it) while the other accounts flow; its jobs wait; its pushes hold. Returns false when it
    /// already was.
    @discardableResult
    public func pause(account: String, at date: Date = Date()) async throws -> Bool {
        let since = String(Int(date.timeIntervalSince1970 * 1000))
        let reply = try await redis.send(
            RedisCommand("HSETNX", [RedisArgument(keys.pausedStreams), RedisArgument(Self.accountField + account), RedisArgument(since)]))
        return reply.int == 1
    }

    /// Resumes one account; returns false when it was not paused. Its waiting entries are taken up again at their next
    /// reclaim (within the claim timeout, `ROUNDUP_CLAIM_IDLE_MS`).
    @discardableResult
    public func resume(account: String) async throws -> Bool {
        try await redis.send(RedisCommand("HDEL", [RedisArgument(keys.pausedStreams), RedisArgument(Self.accountField + account)])).int == 1
    }

    /// The paused accounts and since when.
    public func pausedAccounts() async throws -> [String: Date] {
        Self.parseAccounts(try await redis.send(read, timeout: .seconds(1)))
    }

    static func parseAccounts(_ reply: RedisValue) -> [String: Date] {
        var paused: [String: Date] = [:]
        for (name, value) in reply.fieldMap where name.hasPrefix(accountField) {
            let millis = value.string.flatMap(Double.init) ?? 0
            paused[String(name.dropFirst(accountField.count))] = Date(timeIntervalSince1970: millis / 1000)
        }
        return paused
    }
}

/// A worker's or pusher's view of the pauses, read from Redis every `every` (250 ms: a pause holds every process within
/// a second). While Redis cannot be read the last view is kept, so an outage neither pauses nor resumes anything.
/// Exports `roundup_stream_paused{stream}` (1 paused, 0 running) for the streams this process consumes.
///
/// It reads on a small connection of its own. On the shared pool, a read every 250 ms would keep every pooled
/// connection busy, and Redis shrinks a client's query buffer (grown by a batch's pipeline) only once it has been idle
/// for two seconds. That held about 20 KB per connection for good, enough to keep a Redis at its maxmemory from
/// taking webhooks again after the workers drained it (`HostileTrafficTests.aFullRedis…`).
public final class PauseWatcher: Service, Sendable {
    public let streams: [RoundupStream]
    let pauses: StreamPauses
    let every: Duration
    let logger: Logger
    let redis: RedisClient
    private let state = NIOLockedValueBox<Set<RoundupStream>>([])
    private let accounts = NIOLockedValueBox<Set<String>>([])
    private let connection = NIOLockedValueBox<RedisConnection?>(nil)

    public init(streams: [RoundupStream], redis: RedisClient, keys: RedisKeys, every: Duration = .milliseconds(250), logger: Logger) {
        self.streams = streams
        self.pauses = StreamPauses(redis: redis, keys: keys)
        self.redis = redis
        self.every = every
        self.logger = logger
        for stream in streams { Gauge(label: "roundup_stream_paused", dimensions: [("stream", stream.rawValue)]).record(0) }
        Gauge(label: "roundup_accounts_paused").record(0)
    }

    /// Whether `stream` is paused, as last read.
    public func isPaused(_ stream: RoundupStream) -> Bool { state.withLockedValue { $0.contains(stream) } }

    /// Whether an operator paused `account`, as last read (a set lookup: free while no account is paused).
    public func isPaused(account: String) -> Bool { accounts.withLockedValue { $0.isEmpty ? false : $0.contains(account) } }

    /// The accounts an operator paused, as last read (one read for a whole batch).
    public var pausedAccounts: Set<String> { accounts.withLockedValue { $0 } }

    /// The paused streams this process consumes, in a stable order (for `/readyz`).
    public var paused: [RoundupStream] {
        let current = state.withLockedValue { $0 }
        return streams.filter(current.contains)
    }

    /// Reads the pauses once; returns false when Redis could not be read.
    @discardableResult
    public func refresh() async -> Bool {
        guard let reply = await read() else { return false }
        let current = StreamPauses.parse(reply)
        let pausedAccounts = Set(StreamPauses.parseAccounts(reply).keys)
        let accountsBefore = accounts.withLockedValue { value -> Set<String> in
            defer { value = pausedAccounts }
            return value
        }
        if accountsBefore != pausedAccounts {
            for account in pausedAccounts.subtracting(accountsBefore).sorted() {
                logger.notice("account paused by an operator: its entries wait", metadata: ["account": "\(account)"])
            }
            for account in accountsBefore.subtracting(pausedAccounts).sorted() {
                logger.notice("account resumed", metadata: ["account": "\(account)"])
            }
            Gauge(label: "roundup_accounts_paused").record(pausedAccounts.count)
        }
        let mine = Set(current.keys).intersection(streams)
        let before = state.withLockedValue { value -> Set<RoundupStream> in
            defer { value = mine }
            return value
        }
        for stream in mine.subtracting(before) {
            logger.notice("stream paused by an operator: reading nothing new, holding what is pending", metadata: ["stream": "\(stream.rawValue)"])
            Gauge(label: "roundup_stream_paused", dimensions: [("stream", stream.rawValue)]).record(1)
        }
        for stream in before.subtracting(mine) {
            logger.notice("stream resumed", metadata: ["stream": "\(stream.rawValue)"])
            Gauge(label: "roundup_stream_paused", dimensions: [("stream", stream.rawValue)]).record(0)
        }
        return true
    }

    public func run() async throws {
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            await refresh()
            try? await Task.sleep(for: every)
        }
        if let open = connection.withLockedValue({ $0 }) { try? await open.close().get() }
    }

    /// The pauses hash as Redis has it now, on this watcher's own connection (opened again after an error); nil when
    /// Redis cannot be read.
    func read() async -> RedisValue? {
        do {
            var open = connection.withLockedValue { $0 }
            if open?.isActive != true {
                let fresh = try await redis.dedicatedConnection(for: pauses.keys.pausedStreams).get()
                connection.withLockedValue { $0 = fresh }
                open = fresh
            }
            guard let open else { return nil }
            return try await open.send(pauses.read, timeout: .seconds(1)).get()
        } catch {
            if let broken = connection.withLockedValue({ value -> RedisConnection? in
                defer { value = nil }
                return value
            }) {
                broken.close().whenComplete { _ in }
            }
            return nil
        }
    }
}

/// One Redis stream of a `RoundupStream`, with its dead letters and its errors hash (webhook shards only), all in one
/// slot.
public struct StreamPart: Sendable, Hashable {
    /// `webhooks/7`, `jobs`, `push`: for messages and per-shard detail.
    public var label: String
    public var stream: String
    public var deadLetters: String
    public var errors: String?
    public var shard: WebhookShard?
}

extension RoundupStream {
    /// The driver of one consumer in the group of a stream kept in one Redis stream (jobs, push), on the keys
    /// `RedisKeys` names for it: the stream, its group and its dead letters, kept at most `deadLetterMax` and
    /// `deadLetterMaxAge`.
    public func driver(
        redis: RedisClient, keys: RedisKeys, consumer: String, deadLetterMax: Int = 10_000, deadLetterMaxAge: Duration = .seconds(180 * 86_400)
    ) -> RedisStreamDriver {
        precondition(self != .webhooks, "the webhook stream is sharded: webhookDriver")
        return partDrivers(redis: redis, keys: keys, consumer: consumer, deadLetterMax: deadLetterMax, deadLetterMaxAge: deadLetterMaxAge)[0]
    }

    /// The driver of one worker in the webhook shards' group: every shard, its errors and its dead letters (each kept
    /// at most `deadLetterMax` and `deadLetterMaxAge`), and on a standalone Redis the single stream of the versions
    /// before shards until it is drained.
    public static func webhookDriver(
        redis: RedisClient, keys: RedisKeys, consumer: String, deadLetterMax: Int = 10_000, deadLetterMaxAge: Duration = .seconds(180 * 86_400)
    ) -> ShardedStreamDriver {
        let parts = RoundupStream.webhooks.partDrivers(
            redis: redis, keys: keys, consumer: consumer, deadLetterMax: deadLetterMax, deadLetterMaxAge: deadLetterMaxAge)
        let legacy =
            redis.isCluster
            ? nil
            : RedisStreamDriver(
                redis: redis, stream: keys.legacyWebhookStream, group: keys.workerGroup, consumer: consumer,
                errors: keys.legacyWebhookStream + ":errors",
                // Shard 0's dead letters, where `roundupctl dlq` sees them (a standalone Redis: any key goes with any).
                deadLetters: .init(stream: keys.deadLetterStream(WebhookShard(index: 0)), maxCount: deadLetterMax, maxAge: deadLetterMaxAge))
        return ShardedStreamDriver(redis: redis, parts: parts, legacy: legacy)
    }

    private func partDrivers(
        redis: RedisClient, keys: RedisKeys, consumer: String, deadLetterMax: Int, deadLetterMaxAge: Duration
    ) -> [RedisStreamDriver] {
        parts(keys).map { part in
            RedisStreamDriver(
                redis: redis, stream: part.stream, group: group(keys), consumer: consumer, errors: part.errors,
                deadLetters: .init(stream: part.deadLetters, maxCount: deadLetterMax, maxAge: deadLetterMaxAge),
                load: part.shard.map {
                    StreamLoad(
                        key: keys.webhookLoad($0), ownerField: WebhookEvent.Field.account.rawValue, sizeField: WebhookEvent.Field.body.rawValue)
                })
        }
    }
}

extension StreamConsumer {
    /// Runs until the process shuts down gracefully, holding while an operator pauses `stream` (`PauseWatcher`).
    public func run(_ stream: RoundupStream, pauses: PauseWatcher?) async {
        await run(isStopping: { Task.isShuttingDownGracefully }, isPaused: { pauses?.isPaused(stream) ?? false })
    }
}
