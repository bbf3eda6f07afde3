import Foundation
public import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStreams

/// An entry delivered to a consumer and not yet acknowledged: being worked on, or failing and waiting to be retried.
public struct PendingEntry: Sendable, Equatable {
    public var id: String
    public var consumer: String
    public var idleMilliseconds: Int
    /// Deliveries so far; at `ROUNDUP_MAX_DELIVERIES` a webhook event goes to the dead letters.
    public var deliveries: Int
    /// The last error recorded for it (webhook events only); nil while none was.
    public var lastError: String?
    /// What the entry is about, read from its fields: its account, and its event type or job kind.
    public var account: String?
    public var type: String?

    public var json: JSONValue {
        .object([
            "id": .string(id), "consumer": .string(consumer), "idle_ms": .number(Double(idleMilliseconds)), "deliveries": .number(Double(deliveries)),
            "last_error": lastError.json, "account": account.json, "type": type.json,
        ])
    }
}

/// `roundupctl pending`: a stream's pending entries, oldest first, with their delivery counts and last errors.
public enum PendingInspector {
    /// Up to `limit` pending entries after `after` (exclusive; nil: from the oldest), optionally only those delivered at
    /// least `minDeliveries` times, shard after shard for the webhook stream (ids `<shard>:<id>`). Returns them and the
    /// id to continue after, nil at the end.
    public static func page(
        _ stream: RoundupStream, redis: RedisClient, keys: RedisKeys, after: String? = nil, limit: Int, minDeliveries: Int = 1
    ) async throws -> (entries: [PendingEntry], next: String?) {
        let parts = stream.parts(keys)
        var firstPart = 0
        var cursor: String?
        if let after {
            guard let (part, id) = stream.part(holding: after, keys: keys), let index = parts.firstIndex(of: part) else {
                throw RedisClientError(.unexpectedReply, "\(after) is no entry id of the \(stream.rawValue) stream")
            }
            firstPart = index
            cursor = id
        }
        var entries: [(PendingEntry, StreamPart, String)] = []
        var last: String?
        partLoop: for index in firstPart..<parts.count {
            let part = parts[index]
            // Filtering by deliveries may skip many: read in pages until `limit` match or the list ends.
            while entries.count < limit {
                let start = cursor.map { "(" + $0 } ?? "-"
                let reply: RedisValue
                do {
                    reply = try await redis.send(
                        RedisCommand(
                            "XPENDING",
                            [RedisArgument(part.stream), RedisArgument(stream.group(keys)), RedisArgument(start), "+", RedisArgument(100)]))
                } catch let error as RedisClientError where error.isNoGroup {
                    break  // never consumed: nothing pending
                }
                let rows = reply.array ?? []
                for row in rows {
                    guard let fields = row.array, fields.count >= 4, let id = fields[0].string else { continue }
                    cursor = id
                    last = stream.name(of: id, in: part)
                    guard let deliveries = fields[3].int, deliveries >= minDeliveries else { continue }
                    entries.append(
                        (
                            PendingEntry(
                                id: stream.name(of: id, in: part), consumer: fields[1].string ?? "?", idleMilliseconds: fields[2].int ?? 0,
                                deliveries: deliveries, lastError: nil, account: nil, type: nil), part, id
                        ))
                    if entries.count == limit { break partLoop }
                }
                if rows.count < 100 { break }
            }
            cursor = nil
        }
        var described: [PendingEntry] = []
        for part in parts {
            var mine = entries.filter { $0.1 == part }
            guard !mine.isEmpty else { continue }
            var list = mine.map(\.0)
            try await describe(&list, ids: mine.map(\.2), part: part, stream: stream, redis: redis)
            for index in mine.indices { mine[index].0 = list[index] }
            described += list
        }
        let order = Dictionary(uniqueKeysWithValues: entries.enumerated().map { ($1.0.id, $0) })
        described.sort { order[$0.id, default: 0] < order[$1.id, default: 0] }
        // More may follow only when the page is full.
        return (described, described.count == limit ? last : nil)
    }

    /// Adds each entry's last error and what it is about (one pipeline); `ids` are their ids within `part`.
    static func describe(_ entries: inout [PendingEntry], ids: [String], part: StreamPart, stream: RoundupStream, redis: RedisClient) async throws {
        guard !entries.isEmpty else { return }
        var commands = ids.map { RedisCommand("XRANGE", [RedisArgument(part.stream), RedisArgument($0), RedisArgument($0)]) }
        if let errors = part.errors { commands.append(RedisCommand("HMGET", [RedisArgument(errors)] + ids.map { RedisArgument($0) })) }
        let replies = try await redis.pipeline(commands)
        let recorded = part.errors == nil ? [] : (replies.last?.array ?? [])
        for index in entries.indices {
            let fields = replies[index].streamEntries.first?.fields ?? [:]
            switch stream {
            case .webhooks:
                entries[index].account = fields.text(WebhookEvent.Field.account)
                entries[index].type = fields.text(WebhookEvent.Field.type)
            case .jobs:
                entries[index].account = fields.text(SyncJobMessage.Field.account)
                entries[index].type = fields.text(SyncJobMessage.Field.kind)
            case .push:
                entries[index].account = fields.text(PushRequest.Field.account)
                entries[index].type = fields.text(PushRequest.Field.kind)
            }
            // Recorded as `class<TAB>message` (`StreamFailure.recorded`): shown as `class: message`.
            if index < recorded.count, let text = recorded[index].string {
                entries[index].lastError = text.replacingOccurrences(of: "\t", with: ": ")
            }
        }
    }
}
