public import AsyncHTTPClient
import Crypto
import Foundation
public import Logging
import Metrics
import NIOCore
public import NIOHTTP1
public import RoundupCore
public import RoundupRedis
public import RoundupRuntime
import RoundupStore
public import RoundupStreams
public import RoundupTrello

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

    public init(
        redis: RedisClient, keys: RedisKeys, tokenLimit: Int, keyLimit: Int, window: Duration = .seconds(10), margin: Duration = .milliseconds(500),
        logger: Logger
    ) {
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

    public func acquire(_ credentials: TrelloCredentials) async throws {
        let token = "t:" + Self.digest(credentials.token)
        let apiKey = Self.digest(credentials.apiKey)
        let key = "k:" + apiKey
        let redisKeys = [
            RedisArgument(keys.trelloWindow(token, apiKeyDigest: apiKey)), RedisArgument(keys.trelloWindow(key, apiKeyDigest: apiKey)),
            RedisArgument(keys.trelloPause(token, apiKeyDigest: apiKey)),
        ]
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
            if TrelloWait.exceeds(milliseconds: wait, waited: waitedMilliseconds) {
                // The caller has other work: it is told now, and nothing counts against the window.
                throw TrelloThrottled(wait: .milliseconds(wait))
            }
            let pause = min(wait, 2_000) + Int.random(in: 0...25)
            waitedMilliseconds += pause
            try await Task.sleep(for: .milliseconds(pause))
        }
    }

    public func observe(_ credentials: TrelloCredentials, status: Int, headers: HTTPHeaders) async {
        var pauseMilliseconds = 0
        if status == 429 {
            Counter(label: "roundup_trello_429_total").increment()
            // Clamped before arithmetic: an absurd Retry-After pauses the token a minute at most, and never overflows.
            let header = headers.first(name: "retry-after")
            let retryAfter = TrelloClient.retryAfter(header)
            if retryAfter?.capped == true {
                logger.warning(
                    "trello retry-after capped",
                    metadata: ["retry_after": "\(header?.prefix(32) ?? "")", "cap_seconds": "\(TrelloClient.maxRetryAfterSeconds)"])
            }
            pauseMilliseconds = max((retryAfter?.seconds ?? 0) * 1000, 500)
        } else if let remaining = headers.first(name: "x-rate-limit-api-token-remaining").flatMap(Int.init), remaining <= 0 {
            pauseMilliseconds = 500
        }
        guard pauseMilliseconds > 0 else { return }
        let token = "t:" + Self.digest(credentials.token)
        let pause = keys.trelloPause(token, apiKeyDigest: Self.digest(credentials.apiKey))
        _ = try? await redis.send(RedisCommand("SET", [RedisArgument(pause), "1", "PX", RedisArgument(pauseMilliseconds)]), timeout: .seconds(1))
    }
}

extension TrelloClient {
    /// The Trello client every process uses: `ROUNDUP_TRELLO_API_URL`, behind the rate limits shared through Redis.
    public static func make(configuration: RoundupConfiguration, http: HTTPClient, redis: RedisClient, logger: Logger) -> TrelloClient {
        let gate = RedisTrelloGate(
            redis: redis, keys: configuration.redisKeys, tokenLimit: configuration.trelloTokenLimit, keyLimit: configuration.trelloKeyLimit,
            logger: logger)
        return TrelloClient(baseURL: configuration.trelloAPIURL, http: http, gate: gate, logger: logger)
    }
}
