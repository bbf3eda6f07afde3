public import Foundation
public import RoundupCore
public import RoundupRedis
import RoundupRuntime
import RoundupStore
public import RoundupStreams

/// What `roundupctl queues` shows for one stream and its consumer group.
public struct StreamReport: Sendable, Equatable {
    public struct Consumer: Sendable, Equatable {
        public var name: String
        public var pending: Int
        public var idleMilliseconds: Int
    }

    /// The name operators use (`roundupctl pause webhooks`).
    public var name: RoundupStream
    /// Its Redis key (the webhook stream's shards: `…stream:webhooks:{wh00…wh63}`).
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
    /// Each shard's own figures (the webhook stream's, when asked for); empty otherwise.
    public var shards: [StreamReport] = []

    public var json: JSONValue {
        var object: [String: JSONValue] = [
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
        ]
        if !shards.isEmpty { object["shards"] = .array(shards.map(\.json)) }
        return .object(object)
    }
}

public enum QueueInspector {
    /// The three streams, in the order `RoundupStream` lists them, with the operators' pauses; with `perShard`, each
    /// webhook shard's own figures too.
    public static func reports(redis: RedisClient, keys: RedisKeys, now: Date = Date(), perShard: Bool = false) async throws -> [StreamReport] {
        let paused = try await StreamPauses(redis: redis, keys: keys).current()
        var reports: [StreamReport] = []
        for stream in RoundupStream.allCases {
            var report = try await report(stream, redis: redis, keys: keys, now: now, perShard: perShard)
            report.pausedSince = paused[stream]
            reports.append(report)
        }
        return reports
    }

    /// One stream's figures over its parts (the webhook shards, summed; ages, their oldest; a consumer's pending, over
    /// every shard, and its idle time, the least), from XLEN, XINFO GROUPS (lag, last delivered), XPENDING (count,
    /// oldest), XINFO CONSUMERS, the oldest waiting entry, dead letters (of jobs and pushes: entries that did not
    /// decode; a failing job ends with its error in the store). One pipeline per primary.
    public static func report(
        _ name: RoundupStream, redis: RedisClient, keys: RedisKeys, now: Date = Date(), perShard: Bool = false
    ) async throws -> StreamReport {
        let parts = name.parts(keys)
        let group = name.group(keys)
        var commands: [RedisCommand] = []
        for part in parts {
            commands += [
                RedisCommand("XLEN", [RedisArgument(part.stream)]),
                RedisCommand("XINFO", ["GROUPS", RedisArgument(part.stream)]),
                RedisCommand("XPENDING", [RedisArgument(part.stream), RedisArgument(group)]),
                RedisCommand("XINFO", ["CONSUMERS", RedisArgument(part.stream), RedisArgument(group)]),
                RedisCommand("XLEN", [RedisArgument(part.deadLetters)]),
            ]
        }
        let replies = try await redis.pipeline(commands)
        var reports: [StreamReport] = []
        for (index, part) in parts.enumerated() {
            reports.append(
                try await partReport(name, part: part, group: group, replies: Array(replies[(index * 5)..<(index * 5 + 5)]), redis: redis, now: now))
        }
        guard reports.count > 1 else { return reports[0] }
        var total = StreamReport(
            name: name,
            stream: keys.prefix + "stream:webhooks:" + WebhookShard.all.first!.tag.dropLast() + "…" + WebhookShard.all.last!.tag.dropFirst(),
            group: group, length: 0, lag: 0, pending: 0, oldestPendingAgeMilliseconds: nil, oldestWaitingAgeMilliseconds: nil, consumers: [],
            deadLetters: 0, pausedSince: nil)
        var consumers: [String: StreamReport.Consumer] = [:]
        for report in reports {
            total.length += report.length
            // A shard never read has no group yet: all it holds waits.
            total.lag = total.lag.map { $0 + (report.lag ?? report.length) }
            total.pending += report.pending
            total.deadLetters += report.deadLetters
            total.oldestPendingAgeMilliseconds = [total.oldestPendingAgeMilliseconds, report.oldestPendingAgeMilliseconds].compactMap { $0 }.max()
            total.oldestWaitingAgeMilliseconds = [total.oldestWaitingAgeMilliseconds, report.oldestWaitingAgeMilliseconds].compactMap { $0 }.max()
            for consumer in report.consumers {
                if var known = consumers[consumer.name] {
                    known.pending += consumer.pending
                    known.idleMilliseconds = min(known.idleMilliseconds, consumer.idleMilliseconds)
                    consumers[consumer.name] = known
                } else {
                    consumers[consumer.name] = consumer
                }
            }
        }
        total.consumers = consumers.values.sorted { $0.name < $1.name }
        if perShard { total.shards = reports }
        return total
    }

    private static func partReport(
        _ name: RoundupStream, part: StreamPart, group: String, replies: [RedisValue], redis: RedisClient, now: Date
    ) async throws -> StreamReport {
        var report = StreamReport(
            name: name, stream: part.stream, group: group, length: replies[0].int ?? 0, lag: nil, pending: 0, oldestPendingAgeMilliseconds: nil,
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
        if report.length > 0 || report.lag != 0,
            let waiting = try await RedisStreamDriver.oldestWaiting(redis: redis, stream: part.stream, after: lastDelivered ?? "0-0")
        {
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
        for shard in report.shards where shard.length > 0 || shard.pending > 0 || shard.deadLetters > 0 {
            lines.append(
                "  \(shard.stream)  length \(shard.length)  lag \(shard.lag.map(String.init) ?? "-")  pending \(shard.pending)  dead \(shard.deadLetters)"
            )
        }
        if !report.shards.isEmpty {
            lines.append("  (\(report.shards.filter { $0.length == 0 && $0.pending == 0 && $0.deadLetters == 0 }.count) shards empty)")
        }
        for consumer in report.consumers {
            lines.append(
                "  \(consumer.name.padding(toLength: max(24, consumer.name.count), withPad: " ", startingAt: 0))  pending \(consumer.pending)  idle \(String(format: "%.1f s", Double(consumer.idleMilliseconds) / 1000))"
            )
        }
        return lines.joined(separator: "\n")
    }
}
