import Logging
import RoundupCore
import RoundupRedis
import RoundupStore

/// Writes every account secret and model → account route from the store to Redis, where the ingress
/// reads them. Run at worker start-up, so a flushed Redis heals.
public enum RoutePublisher {
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
}
