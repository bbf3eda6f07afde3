public import Foundation
public import RoundupCore
public import RoundupRedis
public import RoundupRuntime
import RoundupStore

/// What `roundupctl queues` shows for one stream and its consumer group.
public struct StreamReport: Sendable, Equatable {
    public struct Consumer: Sendable, Equatable {
        public var name: String
        public var pending: Int
        public var idleMilliseconds: Int
    }

    /// The name operators use (`roundupctl pause webhooks`).
    public var name: RoundupStream
    /// Its Redis key.
    public var stream: String
    public var group: String
    public var length: Int
    /// Entries not yet delivered to any consumer of the group.
    public var lag: Int?
    /// Delivered, not yet acknowledged.
    public var pending: Int
    public var oldestPendingAgeMilliseconds: Int?
    /// How long the oldest entry not yet delivered has waited; nil when none waits.
    public var oldestWaitingAgeMilliseconds: Int?
    public var consumers: [Consumer]
    public var deadLetters: Int
    /// Since when an operator paused it; nil while it runs.
    public var pausedSince: Date?

    public var json: JSONValue {
        .object([
            "name": .string(name.rawValue), "stream": .string(stream), "group": .string(group), "length": .number(Double(length)),
            "lag": lag.map { .number(Double($0)) } ?? .null, "pending": .number(Double(pending)),
            "oldest_pending_age_ms": oldestPendingAgeMilliseconds.map { .number(Double($0)) } ?? .null,
            "oldest_waiting_age_ms": oldestWaitingAgeMilliseconds.map { .number(Double($0)) } ?? .null,
            "paused": .bool(pausedSince != nil),
            "paused_since": pausedSince.map { .string(Timestamp.string($0)) } ?? .null,
            "dead_letters": .number(Double(deadLetters)),
            "consumers": .array(
                consumers.map {
                    .object(["name": .string($0.name), "pending": .number(Double($0.pending)), "idle_ms": .number(Double($0.idleMilliseconds))])
                }),
        ])
    }
}

public enum QueueInspector {
    /// The three streams, in the order `RoundupStream` lists them, with the operators' pauses.
    public static func reports(redis: RedisClient, keys: RedisKeys, now: Date = Date()) async throws -> [StreamReport] {
        let paused = try await StreamPauses(redis: redis, keys: keys).current()
        var reports: [StreamReport] = []
        for stream in RoundupStream.allCases {
            var report = try await report(stream, redis: redis, keys: keys, now: now)
            report.pausedSince = paused[stream]
            reports.append(report)
        }
        return reports
    }

    /// One stream's figures: XLEN, XINFO GROUPS (lag, last delivered), XPENDING (count, oldest), XINFO CONSUMERS, the
    /// oldest waiting entry, dead letters (of jobs and pushes: entries that did not decode; a failing job ends with its
    /// error in the store).
    public static func report(_ name: RoundupStream, redis: RedisClient, keys: RedisKeys, now: Date = Date()) async throws -> StreamReport {
        let stream = name.key(keys)
        let group = name.group(keys)
        let deadLetterStream = name.deadLetters(keys)
        let replies = try await redis.pipeline([
            RedisCommand("XLEN", [RedisArgument(stream)]),
            RedisCommand("XINFO", ["GROUPS", RedisArgument(stream)]),
            RedisCommand("XPENDING", [RedisArgument(stream), RedisArgument(group)]),
            RedisCommand("XINFO", ["CONSUMERS", RedisArgument(stream), RedisArgument(group)]),
            RedisCommand("XLEN", [RedisArgument(deadLetterStream)]),
        ])
        var report = StreamReport(
            name: name, stream: stream, group: group, length: replies[0].int ?? 0, lag: nil, pending: 0, oldestPendingAgeMilliseconds: nil,
            oldestWaitingAgeMilliseconds: nil, consumers: [], deadLetters: replies[4].int ?? 0, pausedSince: nil)
        let nowMilliseconds = now.timeIntervalSince1970 * 1000
        let age = { (millis: Double) in max(0, Int(nowMilliseconds - millis)) }
        // XINFO GROUPS: a list of flat maps. A missing stream or group answers an error: nothing consumed yet.
        var lastDelivered: String?
        for groupInfo in replies[1].array ?? [] {
            let info = groupInfo.fieldMap
            guard info["name"]?.string == group else { continue }
            report.lag = info["lag"]?.int
            lastDelivered = info["last-delivered-id"]?.string
        }
        // No group yet: everything in the stream waits.
        if let waiting = try await RedisStreamDriver.oldestWaiting(redis: redis, stream: stream, after: lastDelivered ?? "0-0") {
            report.oldestWaitingAgeMilliseconds = age(waiting)
        }
        if let summary = replies[2].array, summary.count >= 2 {
            report.pending = summary[0].int ?? 0
            if let oldest = summary[1].string.flatMap(StreamStats.milliseconds(ofID:)) { report.oldestPendingAgeMilliseconds = age(oldest) }
        }
        report.consumers = (replies[3].array ?? []).map { item in
            let info = item.fieldMap
            return StreamReport.Consumer(
                name: info["name"]?.string ?? "?", pending: info["pending"]?.int ?? 0, idleMilliseconds: info["idle"]?.int ?? 0)
        }.sorted { $0.name < $1.name }
        return report
    }

    /// A table for people.
    public static func table(_ report: StreamReport) -> String {
        var lines = [
            "stream        \(report.name.rawValue)  (\(report.stream), group \(report.group))\(report.pausedSince.map { "  PAUSED since \(Timestamp.string($0))" } ?? "")",
            "length        \(report.length)",
            "lag           \(report.lag.map(String.init) ?? "-")   (not yet delivered)",
            "pending       \(report.pending)   (delivered, not acked)",
            "oldest        \(report.oldestPendingAgeMilliseconds.map { String(format: "%.1f s", Double($0) / 1000) } ?? "-")   (pending)",
            "oldest wait   \(report.oldestWaitingAgeMilliseconds.map { String(format: "%.1f s", Double($0) / 1000) } ?? "-")   (not yet delivered)",
            "dead letters  \(report.deadLetters)",
            "consumers     \(report.consumers.count)",
        ]
        for consumer in report.consumers {
            lines.append(
                "  \(consumer.name.padding(toLength: max(24, consumer.name.count), withPad: " ", startingAt: 0))  pending \(consumer.pending)  idle \(String(format: "%.1f s", Double(consumer.idleMilliseconds) / 1000))"
            )
        }
        return lines.joined(separator: "\n")
    }
}
