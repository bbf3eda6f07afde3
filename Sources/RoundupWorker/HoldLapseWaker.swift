import Foundation
public import Logging
import Metrics
import NIOCore
import RoundupCore
import RoundupJobs
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams
public import ServiceLifecycle

/// Wakes an account's devices when a device's hold on its changes lapses (`ChangeClaim`): the device that pulled them
/// vanished (a Mac put to sleep, an app killed after its pull, a device deleted), and until someone pulls nothing
/// else would tell the account's other devices that the changes are theirs now. Time is cut into windows of
/// `interval`; at the end of each, one worker (the first to take the window's key in Redis) asks the store which
/// accounts had a hold lapse in it and sends each a background push and a stream wake-up.
public struct HoldLapseWaker: Service {
    let store: any ChangeFeed
    let redis: RedisClient
    let keys: RedisKeys
    let interval: Duration
    let logger: Logger

    public init(store: any ChangeFeed, redis: RedisClient, keys: RedisKeys, interval: Duration = .seconds(15), logger: Logger) {
        self.store = store
        self.redis = redis
        self.keys = keys
        self.interval = interval
        self.logger = logger
    }

    var windowMilliseconds: Int64 { max(1, interval.components.seconds * 1000 + interval.components.attoseconds / 1_000_000_000_000_000) }

    /// Wakes the accounts whose holds lapsed in window `index` (`[index·w, (index+1)·w)` as (after, through]); returns
    /// them, or nil when another worker took the window.
    public func wake(window index: Int64) async throws -> [String]? {
        let width = windowMilliseconds
        let taken = try await redis.send(
            RedisCommand("SET", [RedisArgument(keys.holdLapseWindow(index)), "1", "NX", "PX", RedisArgument(String(width * 4))]))
        guard taken.string == "OK" else { return nil }
        let accounts = try await store.accountsWithLapsedHolds(after: index * width - 1, through: (index + 1) * width - 1)
        for account in accounts {
            _ = try await redis.pipeline(NewChanges.commands(account: account, reason: .changes, keys: keys), timeout: .seconds(2))
        }
        if !accounts.isEmpty {
            Counter(label: "roundup_change_hold_lapse_wakes_total").increment(by: accounts.count)
            logger.info("woke devices for lapsed holds", metadata: ["accounts": "\(accounts.count)"])
        }
        return accounts
    }

    public func run() async throws {
        let width = windowMilliseconds
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            // The window that just ended, a moment after its end (a hold written at its last millisecond is in).
            let now = ChangeClaim.milliseconds(Date())
            let next = (now / width + 1) * width + 200
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .milliseconds(next - now)) }
            if Task.isShuttingDownGracefully || Task.isCancelled { break }
            do {
                _ = try await wake(window: next / width - 1)
            } catch {
                logger.warning("waking devices for lapsed holds failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
