import NIOCore
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams

/// Account secrets and model routes, read from Redis (the ingress never opens the database) and kept
/// for a few seconds so most requests need one Redis round trip, the enqueue. Both caches are bounded in entries and
/// bytes, and their keys have been checked for their shape: a flood of unique ids cannot grow the process.
final class SecretDirectory: Sendable {
    private let redis: RedisClient
    private let keys: RedisKeys
    private let ttl: TimeAmount
    private let secrets: ExpiringCache<AccountLookup>
    private let routes: ExpiringCache<[String]>

    init(redis: RedisClient, keys: RedisKeys, ttl: TimeAmount, maxEntries: Int = 10_000, maxBytes: Int = 4 << 20) {
        self.redis = redis
        self.keys = keys
        self.ttl = ttl
        secrets = ExpiringCache(maxEntries: maxEntries, maxBytes: maxBytes) { lookup in
            guard case .known(let keys) = lookup else { return 0 }
            return keys.secret.utf8.count + (keys.callbackToken?.utf8.count ?? 0)
        }
        routes = ExpiringCache(maxEntries: maxEntries, maxBytes: maxBytes) { $0.reduce(16) { $0 + $1.utf8.count + 16 } }
    }

    /// What the ingress knows of an account: its webhook secret and its callback token (nil until published).
    struct AccountKeys: Sendable {
        var secret: String
        var callbackToken: String?
    }

    /// What the ingress knows of an account id.
    enum AccountLookup: Sendable {
        case known(AccountKeys)
        /// Deleted lately (its tombstone is still kept): Trello should stop calling.
        case deleted
        case unknown
    }

    /// What `keys(account:)` would answer without asking Redis, when it is known and fresh.
    func cachedKeys(account: String) -> AccountLookup? { secrets.value(for: account) }

    /// The account's webhook secret and callback token, or whether it was deleted or is unknown.
    func keys(account: String, on eventLoop: any EventLoop, timeout: TimeAmount) -> EventLoopFuture<AccountLookup> {
        if let cached = cachedKeys(account: account) {
            return eventLoop.makeSucceededFuture(cached)
        }
        let ttl = self.ttl
        return redis.pipeline(
            [
                RedisCommand("HGET", [RedisArgument(keys.webhookSecrets), RedisArgument(account)]),
                RedisCommand("HGET", [RedisArgument(keys.webhookTokens), RedisArgument(account)]),
                RedisCommand("HEXISTS", [RedisArgument(keys.routingVersions(account: account)), "deleted"]),
            ], timeout: timeout
        )
        .hop(to: eventLoop)
        .flatMapThrowing { [secrets] replies in
            // A refusal (a cluster failing over, a Redis loading) says nothing about the account: 503, never 404.
            if let refused = replies.lazy.compactMap(\.errorReply).first {
                throw RedisClientError.reply(refused, answering: "the account's webhook keys")
            }
            let found: AccountLookup
            if let secret = replies.first?.string {
                found = .known(AccountKeys(secret: secret, callbackToken: replies.dropFirst().first?.string))
            } else {
                found = replies.dropFirst(2).first?.int == 1 ? .deleted : .unknown
            }
            // Unknown accounts are remembered briefly too, so a flood of them cannot hammer Redis.
            let lifetime: TimeAmount = if case .known = found { ttl } else { min(ttl, .seconds(1)) }
            secrets.set(found, for: account, lifetime: lifetime)
            return found
        }
    }

    /// The accounts watching a Trello model.
    func accounts(watching model: String, on eventLoop: any EventLoop, timeout: TimeAmount) -> EventLoopFuture<[String]> {
        if let cached = routes.value(for: model) {
            return eventLoop.makeSucceededFuture(cached)
        }
        let ttl = self.ttl
        return redis.send(RedisCommand("SMEMBERS", [RedisArgument(keys.modelRoute(model))]), timeout: timeout, on: eventLoop)
            .hop(to: eventLoop)
            .map { [routes] reply in
                let accounts = (reply.array ?? []).compactMap(\.string).filter { IdentifierShape.isAccountID($0) }.sorted()
                routes.set(accounts, for: model, lifetime: accounts.isEmpty ? min(ttl, .seconds(1)) : ttl)
                return accounts
            }
    }
}
