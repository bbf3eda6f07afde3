import Foundation
public import RoundupCore
public import RoundupRedis
public import RoundupRuntime

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
    /// least `minDeliveries` times. Returns them and the id to continue after, nil at the end.
    public static func page(
        _ stream: RoundupStream, redis: RedisClient, keys: RedisKeys, after: String? = nil, limit: Int, minDeliveries: Int = 1
    ) async throws -> (entries: [PendingEntry], next: String?) {
        var entries: [PendingEntry] = []
        var cursor = after
        // Filtering by deliveries may skip many: read in pages until `limit` match or the list ends.
        while entries.count < limit {
            let start = cursor.map { "(" + $0 } ?? "-"
            let reply: RedisValue
            do {
                reply = try await redis.send(
                    RedisCommand(
                        "XPENDING",
                        [RedisArgument(stream.key(keys)), RedisArgument(stream.group(keys)), RedisArgument(start), "+", RedisArgument(100)]))
            } catch let error as RedisClientError where error.isNoGroup {
                return ([], nil)  // never consumed: nothing pending
            }
            let rows = reply.array ?? []
            for row in rows {
                guard let fields = row.array, fields.count >= 4, let id = fields[0].string else { continue }
                cursor = id
                guard let deliveries = fields[3].int, deliveries >= minDeliveries else { continue }
                entries.append(
                    PendingEntry(
                        id: id, consumer: fields[1].string ?? "?", idleMilliseconds: fields[2].int ?? 0, deliveries: deliveries, lastError: nil,
                        account: nil, type: nil))
                if entries.count == limit { break }
            }
            if rows.count < 100 {
                if entries.count < limit { cursor = nil }
                break
            }
        }
        try await describe(&entries, stream: stream, redis: redis, keys: keys)
        // More may follow only when the page is full.
        return (entries, entries.count == limit ? cursor : nil)
    }

    /// Adds each entry's last error and what it is about (one pipeline).
    static func describe(_ entries: inout [PendingEntry], stream: RoundupStream, redis: RedisClient, keys: RedisKeys) async throws {
        guard !entries.isEmpty else { return }
        var commands = entries.map { RedisCommand("XRANGE", [RedisArgument(stream.key(keys)), RedisArgument($0.id), RedisArgument($0.id)]) }
        if let errors = stream.errors(keys) { commands.append(RedisCommand("HMGET", [RedisArgument(errors)] + entries.map { RedisArgument($0.id) })) }
        let replies = try await redis.pipeline(commands)
        let recorded = stream.errors(keys) == nil ? [] : (replies.last?.array ?? [])
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
