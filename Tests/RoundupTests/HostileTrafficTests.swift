import Foundation
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupTesting
import Testing

/// What the open internet sends: floods of junk, stalled connections, absurd ids, a full Redis, poison entries,
/// forged webhooks, revoked tokens, races and cold starts, against the real processes. Each test asserts the outcome
/// (what Trello, the apps and the operator see), not the mechanism. Parts live in `HostileTrafficTests+*.swift`.
@Suite(.serialized) struct HostileTrafficTests {
    static let secret = "whsec-0123456789abcdef"
}
