import NIOCore
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupStreams

/// What the API processes tell each other about an account, through Redis: its token revoked (`TokenCache`'s epochs),
/// and its open change streams woken to check their token (`ChangeStreams`, `RedisKeys.changeAnnouncements`).
struct AccountSignals: Sendable {
    /// The open change streams of this process.
    let streams: ChangeStreams
    let tokens: TokenCache
    let redis: RedisClient
    let keys: RedisKeys

    /// A long response's check of its bearer token (a change stream, an export).
    func streamToken(account: String, credential: Credential?, store: any AccountRepository) -> StreamToken {
        StreamToken(account: account, credential: credential, redis: redis, tokens: tokens, store: store)
    }

    /// Wakes the account's open change streams on every API process, so each checks its token at once and ends
    /// (`ChangeRoutes.stream`); without Redis, the heartbeat's check ends them.
    func endStreams(_ account: String) async {
        streams.wake(account: account)
        let append = StreamAppend(
            stream: keys.changeAnnouncements, maxLength: ChangeAnnouncement.streamMaxLength, fields: ChangeAnnouncement(account: account).fields)
        _ = try? await redis.send(append.command, timeout: .seconds(2))
    }
}
