public import Logging
import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams

/// The ingress's view of accounts lives in Redis (it never opens the database): webhook secrets, callback tokens and
/// model → account routes. Whatever changes them in the store publishes them here, in order (`RoutingWrites`).
public enum RoutePublisher {
    /// Writes every account secret, token and route from the store (worker start-up, so a flushed Redis heals),
    /// in order with every other publication (see `RoutingWrites`): nothing newer is overwritten, nothing deleted restored.
    public static func publishAll(store: any StoreMaintenance, redis: RedisClient, keys: RedisKeys, logger: Logger) async throws {
        let publication = try await readAll(store: store, redis: redis, keys: keys)
        let outcome = try await publication.write(redis: redis, keys: keys)
        logger.info(
            "routes published",
            metadata: [
                "accounts": "\(publication.accounts)", "models": "\(publication.models)", "written": "\(outcome.written)",
                "newer_kept": "\(outcome.skipped)",
            ])
    }

    /// The first half of `publishAll`: a version, then everything the store says. `write` is the second half; tests
    /// run other publications between the two.
    public static func readAll(store: any StoreMaintenance, redis: RedisClient, keys: RedisKeys) async throws -> Publication {
        let version = try await RoutingWrites.nextVersion(redis: redis, keys: keys)
        let snapshot = try await store.routingSnapshot()
        var writes: [RoutingWrites.Write] = []
        for (account, secret) in snapshot.secrets.sorted(by: { $0.key < $1.key }) { writes.append(.secret(account, secret, keys: keys)) }
        for (account, token) in snapshot.tokens.sorted(by: { $0.key < $1.key }) { writes.append(.token(account, token, keys: keys)) }
        for (model, accounts) in snapshot.routes.sorted(by: { $0.key < $1.key }) {
            for account in accounts.sorted() { writes.append(.route(account, model: model, present: true, keys: keys)) }
        }
        return Publication(
            version: version, writes: writes, accounts: Set(snapshot.secrets.keys).union(snapshot.tokens.keys).count, models: snapshot.routes.count)
    }

    /// What a publisher read, with the version it took before reading.
    public struct Publication: Sendable {
        let version: Int
        let writes: [RoutingWrites.Write]
        public let accounts: Int
        public let models: Int

        /// Writes what was read, item by item unless a newer publication or a deletion got there first; returns
        /// (written, kept because newer).
        @discardableResult
        public func write(redis: RedisClient, keys: RedisKeys) async throws -> (written: Int, skipped: Int) {
            let outcome = try await RoutingWrites.apply(writes, version: version, redis: redis, keys: keys)
            return (outcome.written, outcome.skipped)
        }
    }

    /// Publishes the account's webhook secret as the store has it now (removed when it has none, or the account is gone).
    public static func publishSecret(account: String, store: any AccountRepository, redis: RedisClient, keys: RedisKeys) async throws {
        let version = try await RoutingWrites.nextVersion(redis: redis, keys: keys)
        let secret = try await store.account(id: account)?.trelloWebhookSecret
        _ = try await RoutingWrites.apply([.secret(account, secret, keys: keys)], version: version, redis: redis, keys: keys)
    }

    /// The account's callback token, for the ingress to check deliveries to the account's own URL. A token never
    /// changes, so the value given is the store's; were tokens to rotate, this must read it after taking the version,
    /// as `publishSecret` does. Refused once the account is deleted.
    public static func publishToken(account: String, token: String, redis: RedisClient, keys: RedisKeys) async throws {
        let version = try await RoutingWrites.nextVersion(redis: redis, keys: keys)
        _ = try await RoutingWrites.apply([.token(account, token, keys: keys)], version: version, redis: redis, keys: keys)
    }

    /// Publishes, for each of these models, whether the account watches it now: it does while one of its lists is that
    /// Trello list or on that board. Call after adding or deleting a list, with the list's and its board's ids.
    public static func publishRoutes(account: String, models: [String], store: any ListRepository, redis: RedisClient, keys: RedisKeys) async throws {
        let version = try await RoutingWrites.nextVersion(redis: redis, keys: keys)
        let watched = Set(try await store.syncLists(accountID: account).flatMap { [$0.trelloListID, $0.trelloBoardID] })
        let writes = Set(models).sorted().map { RoutingWrites.Write.route(account, model: $0, present: watched.contains($0), keys: keys) }
        _ = try await RoutingWrites.apply(writes, version: version, redis: redis, keys: keys)
    }

    /// Removes a deleted account's secret, token and routes (`models`: its lists' and boards' ids), and leaves a
    /// tombstone so no publication that read the account before its deletion brings any of it back.
    public static func removeAccount(account: String, models: [String], redis: RedisClient, keys: RedisKeys) async throws {
        let version = try await RoutingWrites.nextVersion(redis: redis, keys: keys)
        let writes: [RoutingWrites.Write] =
            [.tombstone(account, keys: keys), .secret(account, nil, keys: keys), .token(account, nil, keys: keys)]
            + Set(models).sorted().map { .route(account, model: $0, present: false, keys: keys) }
        _ = try await RoutingWrites.apply(writes, version: version, redis: redis, keys: keys)
    }
}
