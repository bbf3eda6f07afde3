public import Foundation
public import RoundupCore
public import RoundupRedis
public import RoundupRuntime

/// What `roundupctl queues` shows for one stream and its consumer group.
public struct StreamReport: Sendable, Equatable {
    public struct Consumer: Sendable, Equatable {
        public var name: String
        public var pending: Int
        public var idleMilliseconds: Int
    }

    public var stream: String
    public var group: String
    public var length: Int
    /// Entries not yet delivered to any consumer of the group.
    public var lag: Int?
    /// Delivered, not yet acknowledged.
    public var pending: Int
    public var oldestPendingAgeMilliseconds: Int?
    public var consumers: [Consumer]
    public var deadLetters: Int

    public var json: JSONValue {
        .object([
            "stream": .string(stream), "group": .string(group), "length": .number(Double(length)),
            "lag": lag.map { .number(Double($0)) } ?? .null, "pending": .number(Double(pending)),
            "oldest_pending_age_ms": oldestPendingAgeMilliseconds.map { .number(Double($0)) } ?? .null,
            "dead_letters": .number(Double(deadLetters)),
            "consumers": .array(
                consumers.map {
                    .object(["name": .string($0.name), "pending": .number(Double($0.pending)), "idle_ms": .number(Double($0.idleMilliseconds))])
                }),
        ])
    }
}

public enum QueueInspector {
    /// Reads the webhook stream's figures: XLEN, XINFO GROUPS (lag), XPENDING (count, oldest), XINFO CONSUMERS, dead letters.
    public static func webhookReport(redis: RedisClient, keys: RedisKeys, now: Date = Date()) async throws -> StreamReport {
        try await report(redis: redis, stream: keys.webhookStream, group: keys.workerGroup, deadLetterStream: keys.deadLetterStream, now: now)
    }

    /// The sync-job stream (jobs are not dead-lettered: a failing job ends with its error in the store).
    public static func jobReport(redis: RedisClient, keys: RedisKeys, now: Date = Date()) async throws -> StreamReport {
        try await report(redis: redis, stream: keys.jobStream, group: keys.workerGroup, deadLetterStream: nil, now: now)
    }

    /// The push stream, read by roundup-pusher's group.
    public static func pushReport(redis: RedisClient, keys: RedisKeys, now: Date = Date()) async throws -> StreamReport {
        try await report(redis: redis, stream: keys.pushStream, group: keys.pusherGroup, deadLetterStream: nil, now: now)
    }

    public static func report(
        redis: RedisClient, stream: String, group: String, deadLetterStream: String?, now: Date = Date()
    ) async throws -> StreamReport {
        let replies = try await redis.pipeline([
            RedisCommand("XLEN", [RedisArgument(stream)]),
            RedisCommand("XINFO", ["GROUPS", RedisArgument(stream)]),
            RedisCommand("XPENDING", [RedisArgument(stream), RedisArgument(group)]),
            RedisCommand("XINFO", ["CONSUMERS", RedisArgument(stream), RedisArgument(group)]),
            deadLetterStream.map { RedisCommand("XLEN", [RedisArgument($0)]) } ?? RedisCommand("PING"),
        ])
        var report = StreamReport(
            stream: stream, group: group, length: replies[0].int ?? 0, lag: nil, pending: 0, oldestPendingAgeMilliseconds: nil,
            consumers: [], deadLetters: replies[4].int ?? 0)
        // XINFO GROUPS: a list of flat maps. A missing stream or group answers an error: nothing consumed yet.
        for groupInfo in replies[1].array ?? [] {
            let info = groupInfo.fieldMap
            guard info["name"]?.string == group else { continue }
            report.lag = info["lag"]?.int
        }
        if let summary = replies[2].array, summary.count >= 2 {
            report.pending = summary[0].int ?? 0
            if let oldest = summary[1].string, let millis = Int(oldest.split(separator: "-").first ?? "") {
                report.oldestPendingAgeMilliseconds = max(0, Int(now.timeIntervalSince1970 * 1000) - millis)
            }
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
            "stream        \(report.stream)  (group \(report.group))",
            "length        \(report.length)",
            "lag           \(report.lag.map(String.init) ?? "-")   (not yet delivered)",
            "pending       \(report.pending)   (delivered, not acked)",
            "oldest        \(report.oldestPendingAgeMilliseconds.map { String(format: "%.1f s", Double($0) / 1000) } ?? "-")",
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
