/// Every Redis key the server uses, under one prefix (`ROUNDUP_REDIS_PREFIX`).
public struct RedisKeys: Sendable {
    public let prefix: String

    public init(prefix: String) { self.prefix = prefix }

    /// The stream the ingress appends webhook events to.
    public var webhookStream: String { prefix + "stream:webhooks" }
    /// Events that failed too often, with their last error.
    public var deadLetterStream: String { prefix + "stream:webhooks:dead" }
    /// The last error of each stream entry still being retried (field = entry id).
    public var webhookErrors: String { prefix + "stream:webhooks:errors" }
    /// The consumer group the workers share.
    public var workerGroup: String { "workers" }
    /// Hash: account id → Trello webhook secret (the ingress cannot open the database).
    public var webhookSecrets: String { prefix + "webhook-secrets" }
    /// Set of the account ids watching a Trello model (list or board).
    public func modelRoute(_ modelID: String) -> String { prefix + "route:" + modelID }
    /// Marks an action already accepted for an account, so redeliveries are not enqueued twice.
    public func seenAction(account: String, action: String) -> String { prefix + "seen:" + account + ":" + action }
}
