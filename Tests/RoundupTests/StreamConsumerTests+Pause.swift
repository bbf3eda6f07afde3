import Foundation
import RoundupRedis
import RoundupStreams
import Synchronization
import Testing

/// `roundupctl pause`, as the one stream consumer sees it: a closure that says the stream is held.
extension StreamConsumerTests {
    final class Switch: Sendable {
        let flag = Mutex(false)
        var value: Bool { flag.withLock { $0 } }
        func set(_ on: Bool) { flag.withLock { $0 = on } }
    }

    @Test func aPausedConsumerTakesNothingAndHandlesEverythingOnceOnResume() async throws {
        let stream = MemoryStream()
        let handler = Recorder()
        let paused = Switch()
        paused.set(true)
        try await Self.running(stream, handler, options: Self.options(batchSize: 4), paused: paused) {
            for n in 0..<10 { stream.add(Self.event(n)) }
            try await Task.sleep(for: .milliseconds(300))
            #expect(handler.handled.isEmpty)
            #expect(stream.pending.isEmpty, "a paused consumer reads nothing: nothing is delivered to it")
            #expect(stream.ids.count == 10)
            paused.set(false)
            #expect(await Self.until { stream.ids.isEmpty })
        }
        #expect(handler.handled.sorted() == (1...10).map { "\($0)-0" }.sorted())
        #expect(Set(handler.handled).count == 10)
    }

    @Test func entriesDeliveredAsThePauseComesStayPendingLeasedAndAreHandledFirstOnResume() async throws {
        let stream = MemoryStream()
        let paused = Switch()
        // The first batch takes a while; the pause comes while it runs, after the next batch was read ahead.
        let handler = Recorder(delay: .milliseconds(150))
        // A claim timeout shorter than the pause: without the lease, held entries would look abandoned.
        try await Self.running(stream, handler, options: Self.options(batchSize: 3, claimIdle: .milliseconds(90)), paused: paused) {
            for n in 0..<9 { stream.add(Self.event(n)) }
            #expect(await Self.until { handler.handled.count == 3 })
            paused.set(true)
            try await Task.sleep(for: .milliseconds(500))
            // The batch in flight finished; the one read ahead is held, pending with this consumer, not begun.
            #expect(handler.handled.count == 3)
            let held = stream.pending
            #expect(held.count == 3, "\(held)")
            #expect(held.values.allSatisfy { $0.consumer == "c1" && $0.deliveries == 1 })
            #expect(held.values.allSatisfy { ContinuousClock.now - $0.lastDelivered < .milliseconds(90) }, "the lease is renewed while paused")
            paused.set(false)
            #expect(await Self.until { stream.ids.isEmpty })
            // Held entries come first, then the rest.
            #expect(Array(handler.handled[3..<6]).sorted() == held.keys.sorted())
        }
        #expect(handler.handled.count == 9 && Set(handler.handled).count == 9)
    }

    @Test func aConsumerStoppedWhilePausedLeavesWhatItHoldsPendingForAnother() async throws {
        let stream = MemoryStream()
        let paused = Switch()
        let first = Recorder(delay: .milliseconds(100))
        try await Self.running(stream, first, options: Self.options(batchSize: 2, claimIdle: .milliseconds(60)), paused: paused) {
            for n in 0..<6 { stream.add(Self.event(n)) }
            #expect(await Self.until { first.handled.count == 2 })
            paused.set(true)
            try await Task.sleep(for: .milliseconds(300))
        }
        // Stopped while paused: the batch read ahead was not handled, and it is still pending, not lost.
        #expect(first.handled.count == 2)
        let left = stream.pending
        #expect(left.count == 2)
        // Another consumer, once the stream runs again, reclaims them and reads the rest.
        let second = Recorder()
        paused.set(false)
        await Self.running(stream, second, options: Self.options(consumer: "c2", batchSize: 2, claimIdle: .milliseconds(60)), paused: paused) {
            #expect(await Self.until { stream.ids.isEmpty })
        }
        #expect(Set(first.handled + second.handled).count == 6)
        #expect(Set(second.handled).isSuperset(of: left.keys))
    }
}
