import HTTPTypes
import Hummingbird
import Logging
import Metrics
import NIOCore
import RoundupCore
import RoundupRedis

#if canImport(Glibc)
import Glibc
import RoundupRuntime
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
        /// What the token was sent as, and the first 16 hex digits of its SHA-256: an account token sent as the
        /// bootstrap token fails there, and still works on the account's routes.
        var member: String

        init(_ use: Failure, request: Request, context: APIRequestContext, tokenHash: String) {
            let forwarded = AuthThrottle.forwardedFor.map { request.headers[values: $0] } ?? []
            bucket = AuthThrottle.client(peer: context.remoteAddress, forwardedFor: forwarded)
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
            guard !trimmed.isEmpty, trimmed.count <= 64 else { return nil }
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

    /// Answers for the store when Redis can: 401 for a token that already failed from this address in the window,
    /// 429 when the address has used its budget. Returns when the store must decide.
    func check(_ attempt: Attempt, unauthorized: APIError) async throws {
        guard limit > 0 else { return }
        let key = RedisArgument(keys.authFailures(address: attempt.bucket))
        let replies: [RedisValue]
        do {
            replies = try await redis.pipeline(
                [RedisCommand("SISMEMBER", [key, RedisArgument(attempt.member)]), RedisCommand("SCARD", [key]), RedisCommand("PTTL", [key])],
                timeout: .milliseconds(500))
        } catch {
            logger.warning("authentication throttle unavailable", metadata: ["error": "\(error)"])
            return
        }
        guard replies.count == 3 else { return }
        if replies[0].int == 1 {
            Counter(label: "roundup_api_auth_failures_total", dimensions: [("kind", "repeated")]).increment()
            throw unauthorized
        }
        guard let count = replies[1].int, count >= limit else { return }
        let ttl = replies[2].int ?? -1
        if ttl == -1 {
            // A set without a TTL would block the address for good: give it its window back.
            _ = try? await redis.send(RedisCommand("PEXPIRE", [key, RedisArgument(windowSeconds * 1000)]), timeout: .milliseconds(500))
        }
        let retry = ttl > 0 ? min(windowSeconds, max(1, (ttl + 999) / 1000)) : windowSeconds
        Counter(label: "roundup_api_auth_throttled_total").increment()
        throw APIError(
            .tooManyRequests, "too_many_failures",
            "too many failed authentications from this address; retry in \(retry) s", headers: [.retryAfter: String(retry)])
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
