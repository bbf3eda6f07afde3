import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams

/// Finds the account whose bearer token the request carries and puts it on the context for the routes after it (which
/// read it from their `AuthenticatedContext`); tokens are looked up by their SHA-256 only, and kept for a while once found (`TokenCache`: a
/// revocation anywhere makes every process look again). An address over its budget of failed tokens is answered 429
/// before a token not kept costs a store query (`AuthThrottle`); an account over its request rate, 429 (`RateLimit`).
struct AuthenticationMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext
    let store: any OutboundStore
    let throttle: AuthThrottle
    let rateLimit: RateLimit
    let tokens: TokenCache

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        let (account, credential) = try await authenticate(request, context)
        context.authenticated = (account, credential)
        return try await next(request, context)
    }

    func authenticate(_ request: Request, _ context: Context) async throws -> (String, Credential) {
        guard let token = Self.bearerToken(request) else { throw APIError.unauthorized("send Authorization: Bearer <token>") }
        let tokenHash = Self.hash(token)
        let attempt = AuthThrottle.Attempt(.token, request: request, context: context, tokenHash: tokenHash)
        let invalid = APIError.unauthorized("the token is not valid (rotated, deleted, or never issued)")
        var redisAnswered = true
        if let kept = tokens.kept(tokenHash) {
            // One round trip, to the account's slot alone, checks the account's token epoch and, only while it is the
            // one the token was found with (no revocation since), counts the request: a revoked token's request leaves
            // no count behind. The address's throttle is not asked: the store accepted this token within
            // `TokenCache.lifetime` and nothing revoked it since, so it is no guess (`AuthThrottle` lets such tokens
            // through), and its requests do not all go to one cluster primary.
            switch try await rateLimit.check(kept.account, whileEpochIs: kept.epoch, epochKey: tokens.keys.authEpoch(account: kept.account)) {
            case .counted: return (kept.account, Credential(tokenHash: tokenHash, epoch: kept.epoch))
            case .epochMoved: break
            case .unavailable:
                // Not asked for the throttle: a kept token is no guess, and the store will find it.
                redisAnswered = false
            }
            tokens.forget(tokenHash)
        } else {
            try await throttle.check(attempt, unauthorized: invalid)
        }
        Counter(label: "roundup_api_token_lookups_total").increment()
        guard let found = try await tokens.find(tokenHash, askRedis: redisAnswered, lookup: { try await store.accountID(tokenHash: tokenHash) })
        else {
            await throttle.record(.token, attempt)
            throw invalid
        }
        // Redis just failed to answer: the limiter lets the request through (logged) rather than wait for it again.
        if let epoch = found.epoch {
            try await rateLimit.check(found.account)
            // The address may also be sending bad tokens (a carrier's NAT): this one is no guess (`AuthThrottle`).
            await throttle.accepted(tokenHash)
            return (found.account, Credential(tokenHash: tokenHash, epoch: epoch))
        }
        return (found.account, Credential(tokenHash: tokenHash, epoch: nil))
    }

    /// The token of `Authorization: Bearer <token>`, or nil.
    static func bearerToken(_ request: Request) -> String? {
        guard let header = request.headers[.authorization] else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : token
    }

    /// A token's SHA-256 in lower-case hex: all the store keeps of it.
    static func hash(_ token: String) -> String {
        SHA256.hash(data: Array(token.utf8)).withUnsafeBytes { Hex.lowercase($0) }
    }

    /// A new account token: `rt_` and 32 random bytes in URL-safe base64.
    static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let base64 = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return "rt_" + base64
    }
}

/// Requests per account in a fixed one-minute window, counted in Redis so every API process shares it. When Redis
/// cannot be reached the request is let through (and logged): the API does not fail on a limiter.
struct RateLimit: Sendable {
    let perMinute: Int
    let redis: RedisClient
    let keys: RedisKeys
    let logger: Logger

    func check(_ account: String) async throws {
        let key = Self.key(keys, account: account, minute: Self.currentMinute())
        let replies: [RedisValue]
        do {
            replies = try await redis.pipeline(
                [RedisCommand("INCR", [RedisArgument(key)]), RedisCommand("EXPIRE", [RedisArgument(key), 120])], timeout: .milliseconds(500))
        } catch {
            logger.warning("rate limiter unavailable", metadata: ["error": "\(error)"])
            return
        }
        try refuse(over: replies.first?.int)
    }

    enum KeptOutcome: Equatable {
        /// The epoch is still the token's: the request was counted (and is within the budget).
        case counted
        /// A token was revoked since: nothing was counted.
        case epochMoved
        /// Redis did not answer, or refused (full): nothing is known.
        case unavailable
    }

    /// The same count for a token `TokenCache` kept, made only while the token epoch (`epochKey`) is still `epoch`. Its
    /// keys are the account's (`{a:<account>}`): one slot, whichever primary serves the account.
    func check(_ account: String, whileEpochIs epoch: Int, epochKey: String) async throws -> KeptOutcome {
        let key = Self.key(keys, account: account, minute: Self.currentMinute())
        let reply: RedisValue
        do {
            reply = try await redis.evaluate(
                Self.countWhileEpoch, keys: [RedisArgument(key), RedisArgument(epochKey)], arguments: [RedisArgument(String(epoch))],
                timeout: .milliseconds(500))
        } catch {
            logger.warning("rate limiter unavailable", metadata: ["error": "\(error)"])
            return .unavailable
        }
        guard let count = reply.int else {
            logger.warning("rate limiter unavailable", metadata: ["reply": "\(reply)"])
            return .unavailable
        }
        if count < 0 { return .epochMoved }
        try refuse(over: count)
        return .counted
    }

    /// KEYS[1]: the account's count of this minute, KEYS[2]: its token epoch (both in the account's slot); ARGV[1]: the
    /// epoch the token was found with. Returns -1 when the epoch moved (nothing counted), else the count.
    static let countWhileEpoch = RedisScript(
        name: "count-while-epoch",
        source: """
            if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[1] then return -1 end
            local count = redis.call('INCR', KEYS[1])
            redis.call('EXPIRE', KEYS[1], 120)
            return count
            """)

    private func refuse(over count: Int?) throws {
        if let count, count > perMinute {
            let retry = 60 - Int(Date().timeIntervalSince1970) % 60
            throw APIError(
                .tooManyRequests, "rate_limited", "more than \(perMinute) requests this minute; retry in \(retry) s",
                headers: [.retryAfter: String(retry)])
        }
    }

    static func currentMinute() -> Int { Int(Date().timeIntervalSince1970 / 60) }

    /// The account's request count of one minute (it expires two minutes later).
    static func key(_ keys: RedisKeys, account: String, minute: Int) -> String {
        keys.requestCount(account: account, minute: minute)
    }
}
