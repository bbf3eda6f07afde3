import Logging
import RoundupCore
import RoundupRedis
import RoundupStore

/// The ingress's view of accounts lives in Redis (it never opens the database): webhook secrets and
/// model → account routes. Whatever changes them in the store publishes them here.
public enum RoutePublisher {
    /// Writes every account secret and route from the store (worker start-up, so a flushed Redis heals).
    public static func publishAll(store: any SyncStore, redis: RedisClient, keys: RedisKeys, logger: Logger) async throws {
        let snapshot = try await store.routingSnapshot()
        var commands: [RedisCommand] = []
        if !snapshot.secrets.isEmpty {
            var arguments = [RedisArgument(keys.webhookSecrets)]
            for (account, secret) in snapshot.secrets.sorted(by: { $0.key < $1.key }) {
                arguments.append(RedisArgument(account))
                arguments.append(RedisArgument(secret))
            }
            commands.append(RedisCommand("HSET", arguments))
        }
        if !snapshot.tokens.isEmpty {
            var arguments = [RedisArgument(keys.webhookTokens)]
            for (account, token) in snapshot.tokens.sorted(by: { $0.key < $1.key }) {
                arguments.append(RedisArgument(account))
                arguments.append(RedisArgument(token))
            }
            commands.append(RedisCommand("HSET", arguments))
        }
        for (model, accounts) in snapshot.routes.sorted(by: { $0.key < $1.key }) {
            commands.append(RedisCommand("SADD", [RedisArgument(keys.modelRoute(model))] + accounts.sorted().map { RedisArgument($0) }))
        }
        guard !commands.isEmpty else { return }
        let replies = try await redis.pipeline(commands)
        if let failure = replies.first(where: { if case .error = $0 { return true } else { return false } }) {
            throw RedisClientError(.server, "publishing routes: \(failure)")
        }
        logger.info("routes published", metadata: ["accounts": "\(snapshot.secrets.count)", "models": "\(snapshot.routes.count)"])
    }

    public static func publishSecret(account: String, secret: String, redis: RedisClient, keys: RedisKeys) async throws {
        _ = try await redis.send(RedisCommand("HSET", [RedisArgument(keys.webhookSecrets), RedisArgument(account), RedisArgument(secret)]))
    }

    /// The account's callback token, for the ingress to check deliveries to the account's own URL.
    public static func publishToken(account: String, token: String, redis: RedisClient, keys: RedisKeys) async throws {
        _ = try await redis.send(RedisCommand("HSET", [RedisArgument(keys.webhookTokens), RedisArgument(account), RedisArgument(token)]))
    }

    public static func addRoutes(account: String, models: [String], redis: RedisClient, keys: RedisKeys) async throws {
        try await check(redis.pipeline(models.map { RedisCommand("SADD", [RedisArgument(keys.modelRoute($0)), RedisArgument(account)]) }))
    }

    public static func removeRoutes(account: String, models: [String], redis: RedisClient, keys: RedisKeys) async throws {
        try await check(redis.pipeline(models.map { RedisCommand("SREM", [RedisArgument(keys.modelRoute($0)), RedisArgument(account)]) }))
    }

    public static func removeAccount(account: String, models: [String], redis: RedisClient, keys: RedisKeys) async throws {
        var commands = models.map { RedisCommand("SREM", [RedisArgument(keys.modelRoute($0)), RedisArgument(account)]) }
        commands.append(RedisCommand("HDEL", [RedisArgument(keys.webhookSecrets), RedisArgument(account)]))
        commands.append(RedisCommand("HDEL", [RedisArgument(keys.webhookTokens), RedisArgument(account)]))
        try await check(redis.pipeline(commands))
    }

    private static func check(_ replies: [RedisValue]) throws {
        if let failure = replies.first(where: { if case .error = $0 { return true } else { return false } }) {
            throw RedisClientError(.server, "publishing routes: \(failure)")
        }
    }
}
