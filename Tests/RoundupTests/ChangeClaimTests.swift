import Foundation
import Logging
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import RoundupWorker
import Testing

@testable import RoundupStore

/// The store's rule of `ChangeClaim`, on both stores, with the clock given: a change pulled by one
/// device is that device's until its hold lapses, it gives it back or acks it; a change folded into a newer one passes
/// its hold on; a pull without a device sees everything and holds nothing.
@Suite struct ChangeClaimTests {
    static let t0 = Date(timeIntervalSince1970: 1_800_000_000)

    func claim(_ f: StoreFixture, _ device: String, at seconds: Double = 0, limit: Int = 100, sweepThrough: Int64? = nil) async throws -> [String]? {
        let claim = ChangeClaim(
            deviceID: device, now: Self.t0.addingTimeInterval(seconds), holdFor: 120, throughID: sweepThrough ?? .max, includeOwn: sweepThrough == nil
        )
        return try await f.store.claimChanges(accountID: f.account, claim: claim, limit: limit)?.map(\.trelloCardID)
    }

    /// Gives back the device's holds at `seconds`; it is not given them again for a hold's time.
    func release(_ f: StoreFixture, _ device: String, _ ids: [Int64]?, at seconds: Double) async throws -> Int {
        let until = ChangeClaim(deviceID: device, now: Self.t0.addingTimeInterval(seconds), holdFor: 120).until
        return try await f.store.releaseClaims(accountID: f.account, deviceID: device, ids: ids, declinedUntil: until)
    }

    func register(_ f: StoreFixture, _ devices: String...) async throws {
        for device in devices {
            _ = try await f.store.upsertDevice(
                accountID: f.account, deviceID: device, apnsToken: String(repeating: "ab", count: 32), platform: .ios, environment: .sandbox)
        }
    }

    @Test(arguments: StoreBackend.available) func eachChangeIsOneDevicesUntilItLapsesIsGivenBackOrAcked(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        try await register(f, "iphone", "mac")
        for card in ["c1", "c2", "c3"] { _ = try await f.observe(card, .fields(fullCard("Card \(card)"), full: true)) }

        // The iPhone takes a page of two; the Mac, pulling at the same moment, gets only the third.
        #expect(try await claim(f, "iphone", limit: 2) == ["c1", "c2"])
        #expect(try await claim(f, "mac") == ["c3"])
        // The iPhone pulling again gets its own again, never the Mac's.
        #expect(try await claim(f, "iphone", at: 1) == ["c1", "c2"])
        // A device the account does not have holds nothing.
        #expect(try await claim(f, "stranger") == nil)
        // A pull without a device sees every change.
        #expect(try await f.changes().map(\.trelloCardID) == ["c1", "c2", "c3"])

        // An edit of c1 folds its create into a newer change, which stays the iPhone's.
        let c1Create = try #require(try await f.changes().first { $0.trelloCardID == "c1" }).id
        _ = try await f.observe("c1", .fields(["title": .string("Renamed")], full: false), at: 1_700_000_050)
        #expect(try await claim(f, "mac", at: 2) == ["c3"])
        #expect(try await claim(f, "iphone", at: 2) == ["c2", "c1"])

        // The iPhone vanishes: once its hold lapses (120 s after its last pull), the Mac gets c1 and c2.
        #expect(try await claim(f, "mac", at: 100) == ["c3"])
        // The worker that wakes the devices of lapsed holds (before anyone takes them) finds the account in the window of the iPhone's lapse, and
        // in none before any hold.
        let ms = { (seconds: Double) in ChangeClaim.milliseconds(Self.t0.addingTimeInterval(seconds)) }
        #expect(try await f.store.accountsWithLapsedHolds(after: ms(121), through: ms(123)) == [f.account])
        #expect(try await f.store.accountsWithLapsedHolds(after: ms(-10), through: ms(0)).isEmpty)
        #expect(try await claim(f, "mac", at: 123) == ["c2", "c3", "c1"])
        #expect(try await claim(f, "iphone", at: 124) == [])

        // The Mac gives c2 back: the iPhone gets it at once, the Mac not again before a hold would have lapsed;
        // giving back what it does not hold gives back nothing.
        let c2 = try #require(try await f.changes().first { $0.trelloCardID == "c2" })
        #expect(try await release(f, "mac", [c2.id], at: 124) == 1)
        #expect(try await release(f, "iphone", [c2.id], at: 124) == 0)
        #expect(try await claim(f, "mac", at: 125) == ["c3", "c1"])
        #expect(try await claim(f, "iphone", at: 125) == ["c2"])
        // Named by the id of c1's folded create, the Mac gives back c1's live change (which took that hold over).
        #expect(try await release(f, "mac", [c1Create], at: 125) == 1)
        // Everything the Mac holds, given back: c3 (the folded create is not counted).
        #expect(try await release(f, "mac", nil, at: 125) == 1)
        #expect(try await claim(f, "iphone", at: 126) == ["c2", "c3", "c1"])

        // An ack ends the hold with the change.
        let c3 = try #require(try await f.changes().first { $0.trelloCardID == "c3" })
        _ = try await f.store.acknowledge(accountID: f.account, acks: [ChangeAck(id: c3.id, reminderID: "R3")])
        #expect(try await claim(f, "iphone", at: 127) == ["c2", "c1"])
        #expect(try await claim(f, "mac", at: 127) == [])
        // The iPhone is deleted: its holds lapse with it, and the Mac takes them (its decline long past, in the
        // device's clock: the deletion dates the lapse now, before this test's clock).
        #expect(try await f.store.deleteDevice(accountID: f.account, deviceID: "iphone"))
        #expect(try await claim(f, "mac", at: 128) == ["c2", "c1"])
    }

    /// A stream's sweep below its place: the changes no device holds (or whose hold lapsed), never the ones this device
    /// holds (it sent them already), and none above the place.
    @Test(arguments: StoreBackend.available) func aSweepBelowAPlaceTakesWhatOthersLetGoAndNotItsOwn(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        try await register(f, "iphone", "mac")
        for card in ["c1", "c2", "c3", "c4"] { _ = try await f.observe(card, .fields(fullCard("Card \(card)"), full: true)) }
        let ids = try await f.changes().map(\.id)
        #expect(try await claim(f, "mac", limit: 2) == ["c1", "c2"])
        #expect(try await claim(f, "iphone", at: 1) == ["c3", "c4"])
        // The Mac's stream sits past c4: its sweep through c4 finds nothing to take (c1 and c2 are its own, c3 and c4
        // the iPhone's).
        #expect(try await claim(f, "mac", at: 2, sweepThrough: ids[3]) == [])
        // The iPhone lets go of c3 and its hold on c4 lapses: the sweep through c3 takes c3 only.
        #expect(try await release(f, "iphone", [ids[2]], at: 3) == 1)
        #expect(try await claim(f, "mac", at: 3, sweepThrough: ids[2]) == ["c3"])
        // Later every hold has lapsed, the Mac's own too: a change it held that long unacknowledged is sent again.
        #expect(try await claim(f, "mac", at: 200, sweepThrough: ids[3]) == ["c1", "c2", "c3", "c4"])
        // Taken by the sweep means held: the iPhone gets none of them now.
        #expect(try await claim(f, "iphone", at: 201) == [])
    }

    /// A device that pulled and vanished: when its hold lapses, one worker (of however many) wakes the account's
    /// devices — a background push and a stream wake-up — and nobody is woken for a window with no lapse.
    @Test(arguments: StoreBackend.available) func aLapsedHoldWakesTheAccountsDevicesOnce(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        let redis = try await TestRedis.make()
        defer { Task { await redis.shutdown() } }
        try await register(f, "iphone", "mac")
        _ = try await f.observe("c1", .fields(fullCard("Card c1"), full: true))
        #expect(try await claim(f, "iphone") == ["c1"])
        let lapse = ChangeClaim(deviceID: "iphone", now: Self.t0, holdFor: 120).until
        let waker = HoldLapseWaker(store: f.store, redis: redis.client, keys: redis.keys, interval: .seconds(15), logger: Logger(label: "test"))
        let window = lapse / 15_000
        func pushes() async throws -> [String] {
            try await redis.client.send("XRANGE", RedisArgument(redis.keys.pushStream), "-", "+").streamEntries.compactMap {
                $0.fields["account"].map { String(decoding: $0, as: UTF8.self) }
            }
        }
        #expect(try await waker.wake(window: window - 1) == [])
        #expect(try await pushes().isEmpty)
        #expect(try await waker.wake(window: window) == [f.account])
        #expect(try await pushes() == [f.account])
        let announced = try await redis.client.send("XLEN", RedisArgument(redis.keys.changeAnnouncements)).int
        #expect(announced == 1)
        // A second worker at the same window does nothing.
        let other = HoldLapseWaker(store: f.store, redis: redis.client, keys: redis.keys, interval: .seconds(15), logger: Logger(label: "test"))
        #expect(try await other.wake(window: window) == nil)
        #expect(try await pushes() == [f.account])
    }
}
