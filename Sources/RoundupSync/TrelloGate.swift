import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import Metrics
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupTrello

/// Trello's rate limits, shared by every process through Redis: at most `tokenLimit` requests per token and
/// `keyLimit` per API key in any sliding 10-second window, and a pause for a token after Trello answers 429 or
/// says no requests remain. Keys in Redis name SHA-256 prefixes of the credentials, never the credentials.
public struct RedisTrelloGate: TrelloRequestGate {
    let redis: RedisClient
    let keys: RedisKeys
    let tokenLimit: Int
    let keyLimit: Int
    /// Trello's window, plus a margin for the time between our count and the request's arrival at Trello.
    let windowMilliseconds: Int
    let logger: Logger

    public init(redis: RedisClient, keys: RedisKeys, tokenLimit: Int, keyLimit: Int, window: Duration = .seconds(10), margin: Duration = .milliseconds(500), logger: Logger) {
        self.redis = redis
        self.keys = keys
        self.tokenLimit = tokenLimit
        self.keyLimit = keyLimit
        let total = window + margin
        self.windowMilliseconds = Int(total.components.seconds * 1000 + total.components.attoseconds / 1_000_000_000_000_000)
        self.logger = logger
    }

    static func digest(_ secret: String) -> String {
        SHA256.hash(data: Array(secret.utf8)).prefix(12).map { String(format: "%02x", $0) }.joined()
    }

    static let script = RedisScript(
        name: "trello-window",
        source: """
            -- KEYS[1]: token window (zset), KEYS[2]: key window (zset), KEYS[3]: token pause
            -- ARGV[1]: token limit, ARGV[2]: key limit, ARGV[3]: window ms, ARGV[4]: unique member
            -- Returns 0 when the request may go now, else the milliseconds to wait.
            local pause = redis.call('PTTL', KEYS[3])
            if pause > 0 then return pause end
            local t = redis.call('TIME')
            local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            local window = tonumber(ARGV[3])
            local limits = {tonumber(ARGV[1]), tonumber(ARGV[2])}
            for i = 1, 2 do
                redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - window)
                if redis.call('ZCARD', KEYS[i]) >= limits[i] then
                    local oldest = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
                    return math.max(1, tonumber(oldest[2]) + window - now + 1)
                end
            end
            for i = 1, 2 do
                redis.call('ZADD', KEYS[i], now, ARGV[4])
                redis.call('PEXPIRE', KEYS[i], window)
            end
            return 0
            """)

    public func acquire(_ credentials: TrelloCredentialsValue) async throws {
        let token = "t:" + Self.digest(credentials.token)
        let key = "k:" + Self.digest(credentials.apiKey)
        let redisKeys = [RedisArgument(keys.trelloWindow(token)), RedisArgument(keys.trelloWindow(key)), RedisArgument(keys.trelloPause(token))]
        let member = UUID().uuidString
        var waitedMilliseconds = 0
        while true {
            let reply: RedisValue
            do {
                reply = try await redis.evaluate(
                    Self.script, keys: redisKeys,
                    arguments: [RedisArgument(tokenLimit), RedisArgument(keyLimit), RedisArgument(windowMilliseconds), RedisArgument(member)],
                    timeout: .seconds(2))
            } catch {
                // Without Redis there is no shared count; Trello's own 429s (and the retries) still hold us back.
                logger.warning("trello rate limiter unavailable; sending without it", metadata: ["error": "\(error)"])
                return
            }
            let wait = reply.int ?? 0
            if wait <= 0 {
                if waitedMilliseconds > 0 {
                    Metrics.Timer(label: "roundup_trello_throttle_wait_seconds").recordMilliseconds(waitedMilliseconds)
                }
                return
            }
            Counter(label: "roundup_trello_throttled_total").increment()
            let pause = min(wait, 2_000) + Int.random(in: 0...25)
            waitedMilliseconds += pause
            try await Task.sleep(for: .milliseconds(pause))
        }
    }

    public func observe(_ credentials: TrelloCredentialsValue, status: Int, headers: HTTPHeaders) async {
        var pauseMilliseconds = 0
        if status == 429 {
            Counter(label: "roundup_trello_429_total").increment()
            // Clamped before arithmetic: an absurd Retry-After pauses the token an hour at most, and never overflows.
            let retryAfter = TrelloClient.retryAfterSeconds(headers.first(name: "retry-after")) ?? 0
            pauseMilliseconds = max(retryAfter * 1000, 500)
        } else if let remaining = headers.first(name: "x-rate-limit-api-token-remaining").flatMap(Int.init), remaining <= 0 {
            pauseMilliseconds = 500
        }
        guard pauseMilliseconds > 0 else { return }
        let token = "t:" + Self.digest(credentials.token)
        _ = try? await redis.send(
            RedisCommand("SET", [RedisArgument(keys.trelloPause(token)), "1", "PX", RedisArgument(pauseMilliseconds)]), timeout: .seconds(1))
    }
}

/// Fingerprints of the values this server writes to Trello, so the webhook that echoes a write is not taken
/// for a user's edit. Set before the write, checked (not consumed) by the webhook worker, deleted once the
/// store has the written values' hashes (after which the hash comparison recognises the echo by itself).
public struct EchoFingerprints: Sendable {
    let redis: RedisClient
    let keys: RedisKeys
    let ttlSeconds: Int

    public init(redis: RedisClient, keys: RedisKeys, ttlSeconds: Int) {
        self.redis = redis
        self.keys = keys
        self.ttlSeconds = ttlSeconds
    }

    public static let removedField = "_removed"

    public func fieldKey(account: String, card: String, field: String, value: JSONValue) -> String {
        keys.echo(account: account, card: card, field: field, hash: value.fieldHash)
    }

    public func createKey(account: String, syncList: String, title: String) -> String {
        keys.echoCreate(account: account, syncList: syncList, titleHash: JSONValue.string(SyncFields.normalizedTitle(title)).fieldHash)
    }

    /// Must succeed before the write: a write without its fingerprint could come back as an edit.
    public func mark(_ names: [String]) async throws {
        guard !names.isEmpty else { return }
        let replies = try await redis.pipeline(names.map { RedisCommand("SET", [RedisArgument($0), "1", "EX", RedisArgument(ttlSeconds)]) }, timeout: .seconds(2))
        if let failure = replies.first(where: { if case .error = $0 { return true } else { return false } }) {
            throw RedisClientError(.server, "setting echo fingerprints: \(failure)")
        }
    }

    public func clear(_ names: [String]) async {
        guard !names.isEmpty else { return }
        _ = try? await redis.send(RedisCommand("DEL", names.map { RedisArgument($0) }), timeout: .seconds(2))
    }

    /// Which of these fingerprints exist.
    public func present(_ names: [String]) async throws -> [Bool] {
        guard !names.isEmpty else { return [] }
        let reply = try await redis.send(RedisCommand("MGET", names.map { RedisArgument($0) }), timeout: .seconds(2))
        let values = reply.array ?? []
        return names.indices.map { $0 < values.count && !values[$0].isNull }
    }
}

extension EchoFingerprints {
    /// Drops what our own writes to Trello caused: field values we wrote (fingerprinted before the write), cards we
    /// created (by list and title, until the store knows their ids) and cards we deleted. The field-hash comparison in
    /// the store catches echoes that arrive after the write was recorded; this catches the ones that arrive before.
    /// When Redis cannot answer, that comparison is all there is. `isLive` says whether the store holds the card as
    /// present (a card it does not know may be one we are creating).
    public func withoutEchoes(
        _ observations: [CardObservation], logger: Logger, isLive: (_ account: String, _ card: String) -> Bool
    ) async -> [CardObservation] {
        var names: [String] = []
        var ranges: [Range<Int>] = []
        for o in observations {
            let start = names.count
            switch o.kind {
            case .removed:
                names.append(fieldKey(account: o.accountID, card: o.cardID, field: Self.removedField, value: .bool(true)))
            case .fields(let fields, let full):
                for (name, value) in fields.sorted(by: { $0.key < $1.key }) { names.append(fieldKey(account: o.accountID, card: o.cardID, field: name, value: value)) }
                if full, !isLive(o.accountID, o.cardID), let title = fields[SyncField.title]?.stringValue {
                    names.append(createKey(account: o.accountID, syncList: o.syncListID, title: title))
                }
            }
            ranges.append(start..<names.count)
        }
        let present: [Bool]
        do {
            present = try await self.present(names)
        } catch {
            logger.warning("echo fingerprints unavailable", metadata: ["error": "\(error)"])
            return observations
        }
        var kept: [CardObservation] = []
        var suppressed = 0
        for (o, range) in zip(observations, ranges) {
            switch o.kind {
            case .removed:
                if present[range.lowerBound] { suppressed += 1 } else { kept.append(o) }
            case .fields(let fields, let full):
                let sortedNames = fields.keys.sorted()
                if full, range.count > sortedNames.count, present[range.upperBound - 1] {
                    suppressed += 1  // the create we are making
                    continue
                }
                var remaining = fields
                for (offset, name) in sortedNames.enumerated() where present[range.lowerBound + offset] {
                    remaining[name] = nil
                }
                if remaining.count < fields.count { suppressed += 1 }
                if remaining.isEmpty { continue }
                var copy = o
                copy.kind = .fields(remaining, full: full)
                kept.append(copy)
            }
        }
        if suppressed > 0 { Counter(label: "roundup_echo_suppressed_total").increment(by: suppressed) }
        return kept
    }
}

extension TrelloClient {
    /// The Trello client every process uses: `ROUNDUP_TRELLO_API_URL`, behind the rate limits shared through Redis.
    public static func make(configuration: RoundupConfiguration, http: HTTPClient, redis: RedisClient, logger: Logger) -> TrelloClient {
        let gate = RedisTrelloGate(
            redis: redis, keys: configuration.redisKeys, tokenLimit: configuration.trelloTokenLimit, keyLimit: configuration.trelloKeyLimit, logger: logger)
        return TrelloClient(baseURL: configuration.trelloAPIURL, http: http, gate: gate, logger: logger)
    }
}
