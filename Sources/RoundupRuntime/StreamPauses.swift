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

    /// The stream's key.
    public func key(_ keys: RedisKeys) -> String {
        switch self {
        case .webhooks: keys.webhookStream
        case .jobs: keys.jobStream
        case .push: keys.pushStream
        }
    }

    /// The consumer group that reads it.
    public func group(_ keys: RedisKeys) -> String {
        switch self {
        case .webhooks, .jobs: keys.workerGroup
        case .push: keys.pusherGroup
        }
    }

    /// The hash of its entries' last errors; only the webhook stream records them.
    public func errors(_ keys: RedisKeys) -> String? { self == .webhooks ? keys.webhookErrors : nil }

    /// Its dead letters: webhook events that failed too often or do not decode; job and push entries that do not
    /// decode (a job that fails ends with its error in the store).
    public func deadLetters(_ keys: RedisKeys) -> String {
        switch self {
        case .webhooks: keys.deadLetterStream
        case .jobs: keys.jobDeadLetters
        case .push: keys.pushDeadLetters
        }
    }

    /// The fields its messages carry (what a dead letter's replay puts back on the stream).
    public var messageFields: [String] {
        switch self {
        case .webhooks: WebhookEvent.fieldNames
        case .jobs: SyncJobMessage.Field.allCases.map(\.rawValue)
        case .push: PushRequest.Field.allCases.map(\.rawValue)
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
    private let connection = NIOLockedValueBox<RedisConnection?>(nil)

    public init(streams: [RoundupStream], redis: RedisClient, keys: RedisKeys, every: Duration = .milliseconds(250), logger: Logger) {
        self.streams = streams
        self.pauses = StreamPauses(redis: redis, keys: keys)
        self.redis = redis
        self.every = every
        self.logger = logger
        for stream in streams { Gauge(label: "roundup_stream_paused", dimensions: [("stream", stream.rawValue)]).record(0) }
    }

    /// Whether `stream` is paused, as last read.
    public func isPaused(_ stream: RoundupStream) -> Bool { state.withLockedValue { $0.contains(stream) } }

    /// The paused streams this process consumes, in a stable order (for `/readyz`).
    public var paused: [RoundupStream] {
        let current = state.withLockedValue { $0 }
        return streams.filter(current.contains)
    }

    /// Reads the pauses once; returns false when Redis could not be read.
    @discardableResult
    public func refresh() async -> Bool {
        guard let current = await read() else { return false }
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

    /// The pauses as Redis has them now, on this watcher's own connection (opened again after an error); nil when
    /// Redis cannot be read.
    func read() async -> [RoundupStream: Date]? {
        do {
            var open = connection.withLockedValue { $0 }
            if open?.isActive != true {
                let fresh = try await redis.dedicatedConnection(for: pauses.keys.pausedStreams).get()
                connection.withLockedValue { $0 = fresh }
                open = fresh
            }
            guard let open else { return nil }
            return StreamPauses.parse(try await open.send(pauses.read, timeout: .seconds(1)).get())
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

extension RoundupStream {
    /// The driver of one consumer in this stream's group, on the keys `RedisKeys` names for it: the stream, its group,
    /// its errors hash (webhooks) and its dead letters, kept at most `deadLetterMax` and `deadLetterMaxAge`.
    public func driver(
        redis: RedisClient, keys: RedisKeys, consumer: String, deadLetterMax: Int = 10_000, deadLetterMaxAge: Duration = .seconds(180 * 86_400)
    ) -> RedisStreamDriver {
        RedisStreamDriver(
            redis: redis, stream: key(keys), group: group(keys), consumer: consumer, errors: errors(keys),
            deadLetters: .init(stream: deadLetters(keys), maxCount: deadLetterMax, maxAge: deadLetterMaxAge))
    }
}

extension StreamConsumer {
    /// Runs until the process shuts down gracefully, holding while an operator pauses `stream` (`PauseWatcher`).
    public func run(_ stream: RoundupStream, pauses: PauseWatcher?) async {
        await run(isStopping: { Task.isShuttingDownGracefully }, isPaused: { pauses?.isPaused(stream) ?? false })
    }
}
