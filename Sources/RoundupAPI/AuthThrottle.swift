import HTTPTypes
import Hummingbird
import Logging
import Metrics
import NIOCore
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Failed authentication per client address, kept in Redis so every API process shares it: bearer tokens the store
/// does not know, and wrong bootstrap tokens. For each address, a fixed window (the key expires with it) holds the
/// distinct tokens that failed, as 64-bit prefixes of their SHA-256 (never the tokens), at most `limit` of them:
/// - a token that already failed from this address in the window is answered 401 from Redis, without the store
///   (a client retrying a revoked token costs no query);
/// - an address that has tried `limit` distinct bad tokens is answered 429 with `Retry-After` (the rest of its window)
///   before any further token costs a store query, whatever that token is.
/// A token the store accepted within the last day (`RedisKeys.acceptedToken`, a prefix of its SHA-256, written when a
/// process finds it, creates it or rotates to it) is never refused for its address's budget, nor is one an API process
/// keeps (`TokenCache`: found within its lifetime, no revocation since), which is not even asked about here: the budget stops guesses,
/// and one address may be a carrier's NAT with thousands of phones behind it, some of them sending revoked tokens. The
/// trade-off: an address over its budget still costs a store query for each such token (a token that works, so not a
/// guess), and a token found only once more than a day ago is refused until the window ends, like a guess.
/// With Redis unreachable the throttle lets requests through (logged at warning); it never answers 5xx itself.
///
/// The address is the client's as `client(peer:forwardedFor:)` finds it: the TCP peer, or behind a proxy on a private
/// address the client that proxy forwarded.
struct AuthThrottle: Sendable {
    /// Distinct failed tokens per address in one window; 0 turns the throttle off.
    let limit: Int
    let windowSeconds: Int
    let redis: RedisClient
    let keys: RedisKeys
    let logger: Logger

    init(limit: Int, windowSeconds: Int = 60, redis: RedisClient, keys: RedisKeys, logger: Logger) {
        self.limit = max(0, limit)
        self.windowSeconds = min(max(windowSeconds, 1), 3600)
        self.redis = redis
        self.keys = keys
        self.logger = logger
    }

    /// What failed: an account bearer token, or the bootstrap token of `POST /dailyroundup/account`.
    enum Failure: String, Sendable {
        case token
        case bootstrap
    }

    /// One client address and the token it sent, as the throttle counts them.
    struct Attempt: Sendable {
        var bucket: String
        /// The token's SHA-256 in hex: its `RedisKeys.acceptedToken` says whether it is no guess.
        var tokenHash: String
        /// What the token was sent as, and the first 16 hex digits of its SHA-256: an account token sent as the
        /// bootstrap token fails there, and still works on the account's routes.
        var member: String

        init(_ use: Failure, request: Request, context: APIRequestContext, tokenHash: String) {
            let forwarded = AuthThrottle.forwardedFor.map { request.headers[values: $0] } ?? []
            self.init(bucket: AuthThrottle.client(peer: context.remoteAddress, forwardedFor: forwarded), use, tokenHash: tokenHash)
        }

        init(bucket: String, _ use: Failure, tokenHash: String) {
            self.bucket = bucket
            self.tokenHash = tokenHash
            member = use.rawValue.prefix(1) + ":" + tokenHash.prefix(16)
        }
    }

    static let forwardedFor = HTTPField.Name("X-Forwarded-For")

    /// The client a request is counted for. The TCP peer, unless the peer is on a loopback or private address and the
    /// request carries `X-Forwarded-For` (a proxy in front: the shipped nginx and Kubernetes set-ups): then the
    /// rightmost forwarded address that is not itself private, as the nearest proxy saw it. A client cannot choose
    /// its bucket by sending its own `X-Forwarded-For` through the proxy (the proxy appends the real address after
    /// it); one that reaches the API directly from a private network can, so only proxies should reach it.
    static func client(peer: SocketAddress?, forwardedFor: [String]) -> String {
        guard let text = peer?.ipAddress, let peerAddress = IPAddress(text) else { return "local" }
        guard peerAddress.isPrivate, !forwardedFor.isEmpty else { return peerAddress.bucket }
        var client = peerAddress
        for hop in forwardedFor.flatMap({ $0.split(separator: ",") }).suffix(16).reversed() {
            guard let address = IPAddress(hop) else { break }
            client = address
            if !address.isPrivate { break }
        }
        return client.bucket
    }

    /// An IP address as its bytes: 4 for IPv4 (IPv4-mapped IPv6 included), 16 for IPv6.
    struct IPAddress: Sendable, Equatable {
        var bytes: [UInt8]

        init?(_ text: some StringProtocol) {
            var trimmed = text.drop { $0 == " " || $0 == "\t" }
            while trimmed.last == " " || trimmed.last == "\t" { trimmed = trimmed.dropLast() }
            guard !trimmed.isEmpty, trimmed.utf8.count <= 64 else { return nil }
            // inet_pton writes 4 (in_addr) or 16 (in6_addr) bytes in network order.
            var v4 = [UInt8](repeating: 0, count: 4)
            if inet_pton(AF_INET, String(trimmed), &v4) == 1 {
                bytes = v4
                return
            }
            if trimmed.first == "[", trimmed.last == "]" { trimmed = trimmed.dropFirst().dropLast() }
            var all = [UInt8](repeating: 0, count: 16)
            guard inet_pton(AF_INET6, String(trimmed), &all) == 1 else { return nil }
            let mapped = all[0..<10].allSatisfy { $0 == 0 } && all[10] == 0xFF && all[11] == 0xFF
            bytes = mapped ? Array(all[12..<16]) : all
        }

        /// Loopback, private, link-local and shared (CGNAT) ranges: where proxies and cluster networks live.
        var isPrivate: Bool {
            if bytes.count == 4 {
                let (a, b) = (bytes[0], bytes[1])
                return a == 10 || a == 127 || (a == 172 && (16...31).contains(b)) || (a == 192 && b == 168) || (a == 169 && b == 254)
                    || (a == 100 && (64...127).contains(b))
            }
            guard bytes.count == 16 else { return false }
            let loopback = bytes[0..<15].allSatisfy { $0 == 0 } && bytes[15] == 1
            return loopback || bytes[0] & 0xFE == 0xFC || (bytes[0] == 0xFE && bytes[1] & 0xC0 == 0x80)
        }

        /// The name the throttle counts it under: an IPv4 address, or the /64 of an IPv6 address (what one subscriber
        /// is usually given, so hopping addresses inside it does not buy a new budget).
        var bucket: String {
            if bytes.count == 4 { return bytes.map { String($0) }.joined(separator: ".") }
            let groups = stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
            return groups.joined(separator: ":") + "::/64"
        }
    }

    /// Records a failed token and gives the window its TTL in one step (a set left without a TTL, by an older version
    /// or by hand, gets one here too); the set never holds more than ARGV[3] members.
    static let recordScript = RedisScript(
        name: "auth-failure",
        source: """
            -- KEYS[1]: the address's failed tokens (a set); ARGV[1]: the window in ms, ARGV[2]: the token's hash prefix,
            -- ARGV[3]: the most members kept
            if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[3]) then redis.call('SADD', KEYS[1], ARGV[2]) end
            if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
            return redis.call('SCARD', KEYS[1])
            """)

    /// Lua that decides, for the address whose failed tokens are the set KEYS[1], whether the token ARGV[1] (an
    /// `Attempt.member`) may be looked up now: `refused` is 0 (it may), 1 (it already failed from here in the window)
    /// or 2 (the address has tried ARGV[2] distinct bad tokens and the token is not one the store accepted lately,
    /// KEYS[2]; `ttl` is the window's rest in ms). ARGV[2] = 0 lets
    /// every token through. A set left without a TTL (by an older version, or by hand) gets its window, ARGV[3] ms,
    /// back. Both keys are in `{auth}`; it runs for tokens no API process keeps only (`gate`).
    static let gateLua = """
        local refused, ttl = 0, 0
        local limit = tonumber(ARGV[2])
        if limit > 0 then
          if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
            refused = 1
          elseif redis.call('SCARD', KEYS[1]) >= limit and redis.call('EXISTS', KEYS[2]) == 0 then
            refused = 2
            ttl = redis.call('PTTL', KEYS[1])
            if ttl == -1 then
              redis.call('PEXPIRE', KEYS[1], ARGV[3])
              ttl = tonumber(ARGV[3])
            end
          end
        end

        """

    static let gate = RedisScript(name: "auth-gate", source: gateLua + "return {refused, ttl}")

    /// The gate's keys and arguments for `attempt`.
    func gateInput(_ attempt: Attempt) -> (keys: [RedisArgument], arguments: [RedisArgument]) {
        (
            [RedisArgument(keys.authFailures(address: attempt.bucket)), RedisArgument(keys.acceptedToken(attempt.tokenHash))],
            [RedisArgument(attempt.member), RedisArgument(limit), RedisArgument(windowSeconds * 1000)]
        )
    }

    /// Throws what the gate's `refused` and `ttl` mean: 401 for a token that already failed from this address in the
    /// window, 429 with `Retry-After` when the address has used its budget.
    func judge(refused: Int, ttl: Int, unauthorized: APIError) throws {
        switch refused {
        case 1:
            Counter(label: "roundup_api_auth_failures_total", dimensions: [("kind", "repeated")]).increment()
            throw unauthorized
        case 2:
            let retry = ttl > 0 ? min(windowSeconds, max(1, (ttl + 999) / 1000)) : windowSeconds
            Counter(label: "roundup_api_auth_throttled_total").increment()
            throw APIError(
                .tooManyRequests, "too_many_failures",
                "too many failed authentications from this address; retry in \(retry) s", headers: [.retryAfter: String(retry)])
        default:
            return
        }
    }

    /// Answers for the store when Redis can (`judge`). Returns when the store must decide.
    func check(_ attempt: Attempt, unauthorized: APIError) async throws {
        guard limit > 0 else { return }
        let input = gateInput(attempt)
        let reply: RedisValue
        do {
            reply = try await redis.evaluate(Self.gate, keys: input.keys, arguments: input.arguments, timeout: .milliseconds(500))
        } catch {
            logger.warning("authentication throttle unavailable", metadata: ["error": "\(error)"])
            return
        }
        guard let values = reply.array, values.count == 2, let refused = values[0].int, let ttl = values[1].int else {
            logger.warning("authentication throttle unavailable", metadata: ["reply": "\(reply)"])
            return
        }
        try judge(refused: refused, ttl: ttl, unauthorized: unauthorized)
    }

    /// How long a token the store accepted is no guess for the throttle.
    static let acceptedSeconds = 86_400

    /// Notes a token the store accepted (or the API just issued): no address's budget refuses it for a day.
    func accepted(_ tokenHash: String) async {
        guard limit > 0 else { return }
        do {
            _ = try await redis.send(
                RedisCommand("SET", [RedisArgument(keys.acceptedToken(tokenHash)), "1", "EX", RedisArgument(Self.acceptedSeconds)]),
                timeout: .milliseconds(500))
        } catch {
            logger.warning("authentication throttle unavailable", metadata: ["error": "\(error)"])
        }
    }

    /// Forgets a token revoked by its account (rotated away).
    func forgetAccepted(_ tokenHash: String) async {
        _ = try? await redis.send(RedisCommand("DEL", [RedisArgument(keys.acceptedToken(tokenHash))]), timeout: .milliseconds(500))
    }

    /// Records a token that failed.
    func record(_ failure: Failure, _ attempt: Attempt) async {
        Counter(label: "roundup_api_auth_failures_total", dimensions: [("kind", failure.rawValue)]).increment()
        guard limit > 0 else { return }
        do {
            _ = try await redis.evaluate(
                Self.recordScript, keys: [RedisArgument(keys.authFailures(address: attempt.bucket))],
                arguments: [RedisArgument(windowSeconds * 1000), RedisArgument(attempt.member), RedisArgument(limit)],
                timeout: .milliseconds(500))
        } catch {
            logger.warning("authentication throttle unavailable", metadata: ["error": "\(error)"])
        }
    }
}
