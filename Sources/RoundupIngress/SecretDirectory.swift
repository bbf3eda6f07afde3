import NIOConcurrencyHelpers
import NIOCore
import RoundupCore
import RoundupRedis

/// Account secrets and model routes, read from Redis (the ingress never opens the database) and kept
/// for a few seconds so most requests need one Redis round trip, the enqueue.
final class SecretDirectory: Sendable {
    private struct Entry<Value: Sendable>: Sendable {
        var value: Value
        var expires: NIODeadline
    }

    private let redis: RedisClient
    private let keys: RedisKeys
    private let ttl: TimeAmount
    private let secrets = NIOLockedValueBox([String: Entry<String?>]())
    private let routes = NIOLockedValueBox([String: Entry<[String]>]())

    init(redis: RedisClient, keys: RedisKeys, ttl: TimeAmount) {
        self.redis = redis
        self.keys = keys
        self.ttl = ttl
    }

    /// The account's webhook secret; nil when the account is unknown.
    func secret(account: String, on eventLoop: any EventLoop, timeout: TimeAmount) -> EventLoopFuture<String?> {
        let now = NIODeadline.now()
        if let entry = secrets.withLockedValue({ $0[account] }), entry.expires > now {
            return eventLoop.makeSucceededFuture(entry.value)
        }
        let ttl = self.ttl
        return redis.send(RedisCommand("HGET", [RedisArgument(keys.webhookSecrets), RedisArgument(account)]), timeout: timeout, on: eventLoop)
            .hop(to: eventLoop)
            .map { [secrets] reply in
                let secret = reply.string
                // Unknown accounts are remembered briefly too, so a flood of them cannot hammer Redis.
                let lifetime = secret == nil ? min(ttl, .seconds(1)) : ttl
                secrets.withLockedValue { cache in
                    if cache.count > 100_000 { cache.removeAll(keepingCapacity: true) }
                    cache[account] = Entry(value: secret, expires: .now() + lifetime)
                }
                return secret
            }
    }

    /// The accounts watching a Trello model.
    func accounts(watching model: String, on eventLoop: any EventLoop, timeout: TimeAmount) -> EventLoopFuture<[String]> {
        if let entry = routes.withLockedValue({ $0[model] }), entry.expires > .now() {
            return eventLoop.makeSucceededFuture(entry.value)
        }
        let ttl = self.ttl
        return redis.send(RedisCommand("SMEMBERS", [RedisArgument(keys.modelRoute(model))]), timeout: timeout, on: eventLoop)
            .hop(to: eventLoop)
            .map { [routes] reply in
                let accounts = (reply.array ?? []).compactMap(\.string).sorted()
                let lifetime = accounts.isEmpty ? min(ttl, .seconds(1)) : ttl
                routes.withLockedValue { cache in
                    if cache.count > 100_000 { cache.removeAll(keepingCapacity: true) }
                    cache[model] = Entry(value: accounts, expires: .now() + lifetime)
                }
                return accounts
            }
    }
}
