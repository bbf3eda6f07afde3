import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStreams

/// Where Trello calls us: each account's own callback URL (`WebhookCallback`), under the server's public URL, with the
/// account's callback token, which the ingress checks against the one published in Redis.
public struct WebhookCallbacks: Sendable {
    /// `ROUNDUP_PUBLIC_URL`; nil where nothing registers webhooks (a worker without it).
    let publicURL: String?
    let redis: RedisClient
    let keys: RedisKeys

    public init(publicURL: String?, redis: RedisClient, keys: RedisKeys) {
        self.publicURL = publicURL
        self.redis = redis
        self.keys = keys
    }

    /// The account's callback URL, its token published first: the ingress must have it before Trello can use the URL
    /// (its HEAD check, then deliveries). Nil without a public URL.
    public func url(account: String, token: String) async throws -> String? {
        guard let publicURL else { return nil }
        try await RoutePublisher.publishToken(account: account, token: token, redis: redis, keys: keys)
        return WebhookCallback.url(publicURL: publicURL, account: account, token: token)
    }
}
