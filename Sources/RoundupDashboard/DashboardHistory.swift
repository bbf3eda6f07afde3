public import Foundation
public import Logging
import NIOConcurrencyHelpers
public import RoundupRedis
import RoundupRuntime
public import RoundupStreams
public import ServiceLifecycle

/// The dashboard's small memory: one sample of each stream every `every`, the last `capacity` kept (ten minutes at
/// 5 s), for the depth and throughput charts. Bounded whatever happens: the oldest sample makes room for the newest.
public final class DashboardHistory: Service, Sendable {
    public struct Sample: Sendable, Equatable {
        public var at: Date
        /// Entries in the stream (waiting and pending).
        public var length: Int
        /// Entries ever added (`XINFO STREAM` entries-added); with `length`, how many were finished since the last sample.
        public var added: Int
    }

    public let every: Duration
    public let capacity: Int
    let redis: RedisClient
    let keys: RedisKeys
    let logger: Logger
    private let samples = NIOLockedValueBox<[RoundupStream: [Sample]]>([:])

    public init(redis: RedisClient, keys: RedisKeys, every: Duration = .seconds(5), capacity: Int = 120, logger: Logger) {
        self.redis = redis
        self.keys = keys
        self.every = every
        self.capacity = max(2, capacity)
        self.logger = logger
    }

    public func run() async throws {
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            await sample()
            try? await Task.sleep(for: every)
        }
    }

    /// Takes one sample of every stream, its parts (the webhook shards) summed, in one pipeline per primary (skipped
    /// while Redis does not answer: a gap, not a zero).
    public func sample(at now: Date = Date()) async {
        let streams = RoundupStream.allCases
        let parts = streams.map { $0.parts(keys) }
        guard
            let replies = try? await redis.pipeline(parts.flatMap { $0.map { RedisCommand("XINFO", ["STREAM", RedisArgument($0.stream)]) } })
        else {
            return
        }
        samples.withLockedValue { all in
            var at = 0
            for (stream, streamParts) in zip(streams, parts) {
                // A stream not created yet answers an error: nothing in it, nothing added.
                var length = 0
                var added = 0
                for reply in replies[at..<(at + streamParts.count)] {
                    let info = reply.fieldMap
                    length += info["length"]?.int ?? 0
                    added += info["entries-added"]?.int ?? 0
                }
                at += streamParts.count
                let sample = Sample(at: now, length: length, added: added)
                all[stream, default: []].append(sample)
                if all[stream]!.count > capacity { all[stream]!.removeFirst(all[stream]!.count - capacity) }
            }
        }
    }

    public func samples(of stream: RoundupStream) -> [Sample] { samples.withLockedValue { $0[stream] ?? [] } }

    /// Entries finished (acknowledged and removed) per second between consecutive samples: added minus growth.
    public static func throughput(_ samples: [Sample]) -> [Double] {
        zip(samples, samples.dropFirst()).map { before, after in
            let seconds = after.at.timeIntervalSince(before.at)
            guard seconds > 0 else { return 0 }
            let finished = (after.added - before.added) - (after.length - before.length)
            return max(0, Double(finished)) / seconds
        }
    }
}
