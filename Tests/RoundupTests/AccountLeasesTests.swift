import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

@testable import RoundupAPI

/// `AccountLeases` against a real redis-server (item 5: leases that heal). A Redis stall longer than a lease's
/// lifetime is simulated by its effect: the leases expire in Redis (a short lifetime, nothing renewed meanwhile) or
/// their key is deleted, while the process still holds them. Two `AccountLeases` over one Redis are two API processes.
@Suite(.serialized) struct AccountLeasesTests {
    /// The members lost, in the order their `lost` handlers ran.
    final class Lost: Sendable {
        private let box = NIOLockedValueBox<[String]>([])
        var members: [String] { box.withLockedValue { $0 } }
        func handler(_ name: String) -> @Sendable () -> Void { { self.box.withLockedValue { $0.append(name) } } }
    }

    /// The leases expire in Redis while their process holds them (nothing renewed for longer than their lifetime, as
    /// in a stall): the next renewal adds them again, so another process cannot admit beyond the limit.
    @Test func aLeaseThatExpiredInAStallIsAddedAgainByItsRenewal() async throws {
        let redis = try await TestRedis.make()
        let first = redis.leases(lifetime: .milliseconds(700))
        let second = redis.leases(lifetime: .milliseconds(700))
        let held = [
            try #require(await first.acquire(.streams, account: "acct", limit: 2)),
            try #require(await first.acquire(.streams, account: "acct", limit: 2)),
        ]
        #expect(await second.acquire(.streams, account: "acct", limit: 2) == nil, "a third stream admitted over a limit of 2")

        try await Task.sleep(for: .milliseconds(1000))
        #expect(try await redis.members("acct").isEmpty, "the leases did not expire: the test simulates nothing")
        await first.renewAll()
        #expect(try await redis.members("acct") == Set(held.map(\.member)), "the renewal did not add back the leases that expired")
        #expect(held.allSatisfy { first.holds($0) } && first.count == 2)
        #expect(await second.acquire(.streams, account: "acct", limit: 2) == nil, "another process admitted a stream beyond the limit")
        // The same for exports.
        let export = try #require(await first.acquire(.exports, account: "acct", limit: 1))
        _ = try await redis.client.send("DEL", RedisArgument(redis.keys.accountLeases(account: "acct", kind: "exports")))
        await first.renewAll()
        #expect(try await redis.members("acct", .exports) == [export.member])
        #expect(await second.acquire(.exports, account: "acct", limit: 1) == nil, "another process admitted an export beyond the limit")
        for lease in held + [export] { await first.release(lease) }
        #expect(try await redis.members("acct").isEmpty)
        #expect(try await redis.members("acct", .exports).isEmpty)
        await redis.shutdown()
    }

    /// The leases expire in a stall and another process takes places in the account meanwhile: the renewal adds back
    /// the oldest of them while there is room, and the rest are lost (their handlers run, `holds` is false), so the
    /// account never holds more than its limit; whoever holds a place in Redis keeps it.
    @Test func aLeaseWhosePlaceWasTakenMeanwhileIsLostAndTheLimitHolds() async throws {
        let redis = try await TestRedis.make()
        let first = redis.leases(lifetime: .milliseconds(700))
        let second = redis.leases(lifetime: .seconds(30))
        let lost = Lost()
        var held: [AccountLeases.Lease] = []
        for name in ["a1", "a2", "a3"] {
            held.append(try #require(await first.acquire(.streams, account: "acct", limit: 3, lost: lost.handler(name))))
        }
        try await Task.sleep(for: .milliseconds(1000))
        #expect(try await redis.members("acct").isEmpty, "the leases did not expire: the test simulates nothing")
        // The other process admits a stream while the first's leases are gone.
        let taken = try #require(await second.acquire(.streams, account: "acct", limit: 3))

        await first.renewAll()
        #expect(lost.members == ["a3"], "lost: \(lost.members)")
        #expect(try await redis.members("acct") == [taken.member, held[0].member, held[1].member])
        #expect(first.holds(held[0]) && first.holds(held[1]) && !first.holds(held[2]) && first.count == 2)
        #expect(await second.acquire(.streams, account: "acct", limit: 3) == nil, "a fourth stream admitted over a limit of 3")
        #expect(await first.acquire(.streams, account: "acct", limit: 3) == nil, "a fourth stream admitted over a limit of 3")
        // A second renewal loses nothing more, and the lost lease's release does nothing.
        await first.renewAll()
        await first.release(held[2])
        #expect(lost.members == ["a3"] && first.count == 2)
        #expect(try await redis.members("acct").count == 3)

        // All the places taken: every lease that vanished is lost.
        _ = try await redis.client.send("DEL", RedisArgument(redis.keys.accountLeases(account: "acct", kind: "streams")))
        for _ in 0..<3 { #expect(await second.acquire(.streams, account: "acct", limit: 3) != nil) }
        await first.renewAll()
        #expect(lost.members == ["a3", "a1", "a2"] && first.count == 0, "lost: \(lost.members)")
        #expect(try await redis.members("acct").count == 3)
        await redis.shutdown()
    }

    /// A lease granted while Redis could not be asked (it was down) is recorded by the first renewal once Redis answers
    /// again, or lost when another process took the account's last place first.
    @Test func aLeaseGrantedWhileRedisWasDownIsRecordedOnceItAnswersOrLost() async throws {
        let redis = try await TestRedis.make(private: true)
        let server = try #require(redis.server)
        let first = redis.leases(lifetime: .seconds(30))
        let second = redis.leases(lifetime: .seconds(30))
        let lost = Lost()
        await server.stop()
        let recorded = try #require(await first.acquire(.streams, account: "one", limit: 1, lost: lost.handler("one")))
        let outrun = try #require(await first.acquire(.streams, account: "two", limit: 1, lost: lost.handler("two")))
        try await server.start()
        #expect(
            await TestSupport.eventually(timeout: .seconds(10)) { (try? await redis.client.send("PING", timeout: .milliseconds(300))) != nil })
        // Account two: the other process admits a stream before the first renews.
        let taken = try #require(await second.acquire(.streams, account: "two", limit: 1))

        await first.renewAll()
        #expect(try await redis.members("one") == [recorded.member], "the lease granted without Redis was not recorded")
        #expect(await second.acquire(.streams, account: "one", limit: 1) == nil, "another process admitted a stream beyond the limit")
        #expect(lost.members == ["two"] && !first.holds(outrun) && first.holds(recorded))
        #expect(try await redis.members("two") == [taken.member])
        await redis.shutdown()
    }

    /// The renewal loop (`run`) adds back a lease deleted from Redis within a renewal, and gives back what it holds when
    /// it stops.
    @Test func theRenewalLoopAddsBackALeaseDeletedFromRedis() async throws {
        let redis = try await TestRedis.make()
        let leases = redis.leases(lifetime: .milliseconds(900))
        let lease = try #require(await leases.acquire(.streams, account: "acct", limit: 1))
        let loop = Task { try await leases.run() }
        for _ in 0..<3 {
            _ = try await redis.client.send("DEL", RedisArgument(redis.keys.accountLeases(account: "acct", kind: "streams")))
            #expect(
                try await TestSupport.eventually(timeout: .seconds(2), interval: .milliseconds(20)) {
                    try await redis.members("acct") == [lease.member]
                }, "the lease deleted from Redis was not added back")
        }
        loop.cancel()
        _ = try? await loop.value
        #expect(try await redis.members("acct").isEmpty && leases.count == 0)
        await redis.shutdown()
    }

    /// A change stream whose lease vanished is kept while the account has room (its lease added back), and ends when
    /// the account's places were taken meanwhile on another process.
    @Test func aChangeStreamWhoseLeaseIsLostEnds() async throws {
        let redis = try await TestRedis.make()
        let leases = redis.leases(lifetime: .milliseconds(700))
        let other = redis.leases(lifetime: .seconds(30))
        var logger = Logger(label: "roundup.streams.test")
        logger.logLevel = .critical
        let streams = ChangeStreams(
            limits: .init(maxPerAccount: 1), redis: redis.client, keys: redis.keys, leases: leases, logger: logger)
        let subscription = try await streams.open(account: "acct", device: nil)
        let ended = NIOLockedValueBox(false)
        let reader = Task {
            for await _ in subscription.signals {}
            ended.withLockedValue { $0 = true }
        }
        #expect(streams.count == 1 && leases.count == 1)

        // A stall with room left: the lease comes back and the stream stays.
        try await Task.sleep(for: .milliseconds(1000))
        await leases.renewAll()
        #expect(try await redis.members("acct").count == 1 && leases.count == 1)
        #expect(await other.acquire(.streams, account: "acct", limit: 1) == nil, "a second stream admitted over a limit of 1")
        try await Task.sleep(for: .milliseconds(100))
        #expect(streams.count == 1 && !ended.withLockedValue { $0 })

        // A stall during which another process admits a stream: this one's lease is lost, and the stream ends.
        try await Task.sleep(for: .milliseconds(1000))
        let taken = try #require(await other.acquire(.streams, account: "acct", limit: 1))
        await leases.renewAll()
        #expect(await TestSupport.eventually(timeout: .seconds(2), interval: .milliseconds(10)) { ended.withLockedValue { $0 } })
        #expect(streams.count == 0 && leases.count == 0)
        #expect(try await redis.members("acct") == [taken.member])
        reader.cancel()
        await redis.shutdown()
    }
}

extension TestRedis {
    /// An API process's leases.
    func leases(lifetime: Duration) -> AccountLeases {
        var logger = Logger(label: "roundup.leases.test")
        logger.logLevel = .critical
        return AccountLeases(redis: client, keys: keys, logger: logger, lifetime: lifetime)
    }

    /// The members of the account's set of `kind` in Redis, expired ones left out.
    func members(_ account: String, _ kind: AccountLeases.Kind = .streams) async throws -> Set<String> {
        let now = Int(Date().timeIntervalSince1970 * 1000)
        let reply = try await client.send(
            "ZRANGEBYSCORE", RedisArgument(keys.accountLeases(account: account, kind: kind.rawValue)), RedisArgument(now), "+inf")
        return Set((reply.array ?? []).compactMap(\.string))
    }
}
