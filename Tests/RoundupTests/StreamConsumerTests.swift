import Foundation
import Logging
import RoundupCore
import RoundupRedis
import RoundupStreams
import Synchronization
import Testing

/// The one stream consumer (`StreamConsumer`) on the in-memory driver: its logic without Redis, in well under a second
/// a test.
@Suite struct StreamConsumerTests {
    enum TestFailure: String, StreamFailureClass {
        case broken
        case dependencyDown = "dependency_down"
        var keepsEntryWaiting: Bool { self == .dependencyDown }
    }

    /// A handler that records every entry it is given and answers with `decide`.
    final class Recorder: StreamHandler {
        typealias Failure = TestFailure
        let seen = Mutex<[String]>([])
        let delay: Duration
        let decide: @Sendable (StreamDelivery) -> StreamOutcome

        enum StreamOutcome: Sendable {
            case done, retry(TestFailure?), deadLetter(TestFailure)
        }

        init(delay: Duration = .zero, decide: @escaping @Sendable (StreamDelivery) -> StreamOutcome = { _ in .done }) {
            self.delay = delay
            self.decide = decide
        }

        var handled: [String] { seen.withLock { $0 } }
        /// The entries decoded, in order, each with how many batches had been handled to the end by then.
        let decodes = Mutex<[(id: String, handledBefore: Int)]>([])
        let batchesHandled = Mutex(0)

        /// The entry itself; an entry with an `undecodable` field does not decode.
        func decode(_ entry: StreamDelivery) throws(StreamUndecodable) -> StreamDelivery {
            let handledBefore = batchesHandled.withLock { $0 }
            decodes.withLock { $0.append((entry.id, handledBefore)) }
            if entry.fields["undecodable"] != nil { throw StreamUndecodable("entry \(entry.id) is not a test message") }
            return entry
        }

        func handle(_ batch: [Delivered<StreamDelivery>]) async -> StreamBatchResult<TestFailure> {
            seen.withLock { $0 += batch.map(\.id) }
            if delay > .zero { try? await Task.sleep(for: delay) }
            defer { batchesHandled.withLock { $0 += 1 } }
            var result = StreamBatchResult<TestFailure>()
            for entry in batch.map(\.message) {
                switch decide(entry) {
                case .done: result.done.append(entry.id)
                case .retry(let failure): result.retry.append((entry.id, failure.map { StreamFailure($0, "entry \(entry.id) failed") }))
                case .deadLetter(let failure): result.deadLetter.append((entry.id, StreamFailure(failure, "entry \(entry.id) is poison")))
                }
            }
            return result
        }
    }

    final class Stop: Sendable {
        let flag = Mutex(false)
        var value: Bool { flag.withLock { $0 } }
        func callAsFunction() { flag.withLock { $0 = true } }
    }

    static let logger = Logger(label: "stream-consumer-tests", factory: { _ in SwiftLogNoOpLogHandler() })

    static func options(
        consumer: String = "c1", batchSize: Int = 10, concurrency: Int = 1, claimIdle: Duration = .milliseconds(60), maxDeliveries: Int? = nil
    ) -> StreamConsumer<MemoryStreamDriver, Recorder>.Options {
        .init(
            name: "test", consumer: consumer, batchSize: batchSize, concurrency: concurrency, block: .milliseconds(10), claimIdle: claimIdle,
            reclaimEvery: .milliseconds(10), maxDeliveries: maxDeliveries, errorBackoff: .milliseconds(20) ... .seconds(1),
            dependencyBackoff: .milliseconds(10) ... .milliseconds(50))
    }

    /// Runs a consumer until `body` returns, then stops it gracefully and waits for it; `paused` is its pause switch.
    static func running(
        _ stream: MemoryStream, _ handler: Recorder, options: StreamConsumer<MemoryStreamDriver, Recorder>.Options, paused: Switch = Switch(),
        _ body: () async throws -> Void
    ) async rethrows {
        let stop = Stop()
        let consumer = StreamConsumer(
            options: options, driver: MemoryStreamDriver(stream: stream, consumer: options.consumer), handler: handler, logger: logger)
        let task = Task { await consumer.run(isStopping: { stop.value }, isPaused: { paused.value }) }
        do {
            try await body()
        } catch {
            stop()
            await task.value
            throw error
        }
        stop()
        await task.value
    }

    /// Waits (up to 5 s) for `condition`.
    static func until(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return condition()
    }

    static func event(_ n: Int) -> [String: [UInt8]] { ["n": Array(String(n).utf8)] }

    @Test func doneEntriesAreAckedAndDeletedAndTheirAppendsWritten() async throws {
        let stream = MemoryStream()
        for n in 0..<25 { stream.add(Self.event(n)) }
        struct Appending: StreamHandler {
            func decode(_ entry: StreamDelivery) throws(StreamUndecodable) -> StreamDelivery { entry }
            func handle(_ batch: [Delivered<StreamDelivery>]) async -> StreamBatchResult<UnclassifiedFailure> {
                StreamBatchResult(
                    done: batch.map(\.id), appends: [StreamAppend(stream: "push", maxLength: 100, fields: [("account", Array("a".utf8))])])
            }
        }
        let consumer = StreamConsumer(
            options: .init(name: "test", consumer: "c1", batchSize: 10, block: .milliseconds(10), claimIdle: .seconds(10)),
            driver: MemoryStreamDriver(stream: stream, consumer: "c1"), handler: Appending(), logger: Self.logger)
        let stop = Stop()
        let task = Task { await consumer.run(isStopping: { stop.value }) }
        #expect(await Self.until { stream.ids.isEmpty })
        stop()
        await task.value
        #expect(stream.pending.isEmpty)
        #expect(stream.deadLetters.isEmpty)
        #expect(stream.appended.count == 3)  // one per batch: 10, 10, 5
        let command = try #require(stream.appended.first?.command)
        #expect(command.name == "XADD" && command.arguments.count == 8)  // XADD push MAXLEN ~ 100 * account a
    }

    @Test func aFailingEntryIsRetriedThenDeadLetteredWithItsFailureClass() async throws {
        let stream = MemoryStream()
        let bad = stream.add(Self.event(0))
        let good = stream.add(Self.event(1))
        let handler = Recorder { $0.id == bad ? .retry(.broken) : .done }
        await Self.running(stream, handler, options: Self.options(maxDeliveries: 3)) {
            #expect(await Self.until { stream.deadLetters.count == 1 })
        }
        #expect(handler.handled.filter { $0 == bad }.count == 3)  // read once, reclaimed twice, then given up
        #expect(handler.handled.filter { $0 == good }.count == 1)
        let letter = try #require(stream.deadLetters.first)
        #expect(letter.originalID == bad)
        #expect(letter.deliveries == 3)
        #expect(letter.original == Self.event(0))
        // The typed failure recorded with its last delivery travels with the dead letter.
        #expect(letter.failure(as: TestFailure.self) == StreamFailure(.broken, "entry \(bad) failed"))
        // Each failed delivery is kept with it: when, by whom, with what.
        #expect(letter.attempts.count == 3)
        #expect(letter.attempts.allSatisfy { $0.consumer == "c1" && $0.error == "broken\tentry \(bad) failed" })
        #expect(letter.attempts.map(\.at) == letter.attempts.map(\.at).sorted())
        #expect(stream.ids.isEmpty && stream.pending.isEmpty && stream.errors.isEmpty && stream.attempts.isEmpty)
    }

    /// An entry that fails more often than attempts are kept keeps its last ones, oldest first.
    @Test func anEntryKeepsItsLastAttemptsOnly() async throws {
        let stream = MemoryStream()
        let bad = stream.add(Self.event(0))
        let handler = Recorder { _ in .retry(.broken) }
        let deliveries = StreamAttempt.kept + 3
        await Self.running(stream, handler, options: Self.options(maxDeliveries: deliveries)) {
            #expect(await Self.until { stream.deadLetters.count == 1 })
        }
        #expect(handler.handled.count == deliveries)
        let letter = try #require(stream.deadLetters.first)
        #expect(letter.attempts.count == StreamAttempt.kept)
        #expect(letter.originalID == bad)
    }

    /// A poison entry has one attempt, the handler's reason; a record's lines survive a round trip and a line break in
    /// an error does not split an attempt.
    @Test func aPoisonEntrysOneAttemptAndTheRecordsForm() async throws {
        let stream = MemoryStream()
        _ = stream.add(Self.event(0))
        await Self.running(stream, Recorder { _ in .deadLetter(.broken) }, options: Self.options(maxDeliveries: 5)) {
            #expect(await Self.until { stream.deadLetters.count == 1 })
        }
        let attempts = try #require(stream.deadLetters.first?.attempts)
        #expect(attempts.count == 1 && attempts.first?.consumer == "c1" && attempts.first?.error.hasPrefix("broken: ") == true)
        let record = StreamDeadLetter(
            id: "1-0",
            fields: ["attempts": Array("1700000000000\tw1\tbroken\tone\n1700000001000\tw2\tbroken\ttwo: a\tb\nnot an attempt".utf8)])
        #expect(
            record.attempts == [
                StreamAttempt(at: 1_700_000_000_000, consumer: "w1", error: "broken\tone"),
                StreamAttempt(at: 1_700_000_001_000, consumer: "w2", error: "broken\ttwo: a\tb"),
            ])
        #expect(record.original.isEmpty)  // attempts are the letter's own field, never replayed as the event's
    }

    @Test func aPoisonEntryIsDeadLetteredAtOnce() async throws {
        let stream = MemoryStream()
        let poison = stream.add(Self.event(0))
        let handler = Recorder { _ in .deadLetter(.broken) }
        await Self.running(stream, handler, options: Self.options(maxDeliveries: 5)) {
            #expect(await Self.until { stream.deadLetters.count == 1 })
        }
        #expect(handler.handled == [poison])
        #expect(stream.deadLetters.first?.error == "broken: entry \(poison) is poison")
        #expect(stream.deadLetters.first?.deliveries == 1)
    }

    /// The typed contract: what does not decode as the stream's message is dead-lettered by the consumer, at once and
    /// with its reason, and never reaches the handler; its neighbours are handled as ever. Reading ahead (one batch at a
    /// time) and concurrent batches alike.
    @Test(arguments: [1, 3]) func anEntryThatDoesNotDecodeIsDeadLetteredAtOnceAndNeverHandled(concurrency: Int) async throws {
        let stream = MemoryStream()
        let first = stream.add(Self.event(0))
        let bad = stream.add(["undecodable": Array("yes".utf8)])
        let last = stream.add(Self.event(2))
        let handler = Recorder()
        await Self.running(stream, handler, options: Self.options(batchSize: 2, concurrency: concurrency, maxDeliveries: 5)) {
            #expect(await Self.until { stream.ids.isEmpty })
        }
        #expect(handler.handled.sorted() == [first, last].sorted())
        let letter = try #require(stream.deadLetters.first)
        #expect(stream.deadLetters.count == 1)
        #expect(letter.originalID == bad && letter.deliveries == 1)
        #expect(letter.error == "undecodable: entry \(bad) is not a test message")
        #expect(letter.original == ["undecodable": Array("yes".utf8)])
        #expect(stream.pending.isEmpty)
    }

    @Test func anEntryWaitingForADependencyIsNeverDeadLettered() async throws {
        let stream = MemoryStream()
        let waiting = stream.add(Self.event(0))
        let handler = Recorder { _ in .retry(.dependencyDown) }
        await Self.running(stream, handler, options: Self.options(claimIdle: .milliseconds(20), maxDeliveries: 2)) {
            #expect(await Self.until { handler.handled.count >= 5 })
        }
        #expect(stream.deadLetters.isEmpty)
        #expect((stream.pending[waiting]?.deliveries ?? 0) >= 5)
        #expect(stream.errors[waiting] == StreamFailure(TestFailure.dependencyDown, "entry \(waiting) failed").recorded)
    }

    @Test func aDeadConsumersEntriesAreReclaimed() async throws {
        let stream = MemoryStream()
        for n in 0..<4 { stream.add(Self.event(n)) }
        // A consumer that read them and died.
        let dead = MemoryStreamDriver(stream: stream, consumer: "dead")
        let taken = try await dead.read(count: 10, block: nil)
        #expect(taken.count == 4 && stream.pending.values.allSatisfy { $0.consumer == "dead" })
        let handler = Recorder()
        await Self.running(stream, handler, options: Self.options(consumer: "alive", claimIdle: .milliseconds(50))) {
            #expect(await Self.until { stream.ids.isEmpty })
        }
        #expect(handler.handled.sorted() == taken.map(\.id).sorted())
        #expect(stream.pending.isEmpty)
    }

    @Test func theLeaseKeepsASlowBatchFromBeingReclaimed() async throws {
        let stream = MemoryStream()
        let id = stream.add(Self.event(0))
        // The batch takes five claim timeouts; a second consumer looks for idle entries all the while.
        let slow = Recorder(delay: .milliseconds(250))
        let other = Recorder()
        await Self.running(stream, slow, options: Self.options(consumer: "slow", claimIdle: .milliseconds(50))) {
            #expect(await Self.until { slow.handled == [id] })
            await Self.running(stream, other, options: Self.options(consumer: "other", claimIdle: .milliseconds(50))) {
                #expect(await Self.until { stream.ids.isEmpty })
            }
        }
        #expect(slow.handled == [id])
        #expect(other.handled.isEmpty)
        #expect(stream.calls.contains { $0.operation == "extendLease" })
    }

    /// An entry that does not decode waits, with its batch, for the batch's messages to be handled before it is
    /// dead-lettered: it is under the batch's lease all the while, so a second consumer never takes it over (and a
    /// second dead letter, of an entry already gone, is never written).
    @Test func anUndecodableEntryOfASlowBatchIsLeasedWithItAndDeadLetteredOnce() async throws {
        let stream = MemoryStream()
        let good = stream.add(Self.event(0))
        let bad = stream.add(["undecodable": Array("yes".utf8)])
        let slow = Recorder(delay: .milliseconds(250))
        let other = Recorder()
        await Self.running(stream, slow, options: Self.options(consumer: "slow", claimIdle: .milliseconds(50))) {
            #expect(await Self.until { slow.handled == [good] })
            await Self.running(stream, other, options: Self.options(consumer: "other", claimIdle: .milliseconds(50))) {
                #expect(await Self.until { stream.ids.isEmpty })
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        #expect(stream.deadLetters.count == 1, "\(stream.deadLetters)")
        #expect(stream.deadLetters.first?.originalID == bad && stream.deadLetters.first?.original == ["undecodable": Array("yes".utf8)])
        #expect(other.decodes.withLock { $0.map(\.id) }.isEmpty)
    }

    @Test func driverErrorsBackOffDoublingEachTime() async throws {
        let stream = MemoryStream()
        stream.add(Self.event(0))
        stream.fail("read", times: 4)
        let handler = Recorder()
        await Self.running(stream, handler, options: Self.options()) {
            #expect(await Self.until { stream.ids.isEmpty })
        }
        let reads = stream.calls.filter { $0.operation == "read" }.map(\.at)
        #expect(reads.count >= 5)
        // Waits of 20, 40 and 80 ms between the failed reads.
        let gaps = zip(reads.dropFirst(), reads).prefix(4).map { $0 - $1 }
        #expect(gaps.count == 4)
        for (index, gap) in gaps.enumerated() {
            #expect(gap >= .milliseconds(20) * (1 << index), "gap \(index): \(gap)")
        }
        #expect(gaps[3] < .milliseconds(500))
        #expect(handler.handled.count == 1)
    }

    @Test func shutdownHandlesTheBatchReadAheadAndReadsNoMore() async throws {
        let stream = MemoryStream()
        let ids = (0..<6).map { stream.add(Self.event($0)) }
        let stop = Stop()
        // Full batches of two: while the first is handled the next is read ahead; the shutdown comes meanwhile.
        let handler = Recorder(delay: .milliseconds(50))
        let consumer = StreamConsumer(
            options: Self.options(batchSize: 2), driver: MemoryStreamDriver(stream: stream, consumer: "c1"), handler: handler, logger: Self.logger)
        let task = Task { await consumer.run(isStopping: { stop.value }) }
        #expect(await Self.until { handler.handled.count == 2 })
        stop()
        await task.value
        #expect(handler.handled == Array(ids[..<4]))
        // The second batch was read ahead and decoded while the first was handled.
        #expect(handler.decodes.withLock { $0.filter { $0.handledBefore == 0 }.map(\.id) } == Array(ids[..<4]))
        #expect(stream.ids == Array(ids[4...]))  // never delivered: left for the other consumers
        #expect(stream.pending.isEmpty)
    }

    @Test func shutdownWaitsForConcurrentBatchesInFlight() async throws {
        let stream = MemoryStream()
        for n in 0..<3 { stream.add(Self.event(n)) }
        let stop = Stop()
        let handler = Recorder(delay: .milliseconds(150))
        let consumer = StreamConsumer(
            options: Self.options(batchSize: 1, concurrency: 3), driver: MemoryStreamDriver(stream: stream, consumer: "c1"), handler: handler,
            logger: Self.logger)
        let task = Task { await consumer.run(isStopping: { stop.value }) }
        #expect(await Self.until { handler.handled.count == 3 })
        stop()
        await task.value
        // All three ran at once and were settled before `run` returned.
        #expect(stream.ids.isEmpty && stream.pending.isEmpty)
    }

    @Test func concurrencyBoundsTheEntriesInFlight() async throws {
        let stream = MemoryStream()
        for n in 0..<5 { stream.add(Self.event(n)) }
        let handler = Recorder(delay: .milliseconds(100))
        try await Self.running(stream, handler, options: Self.options(batchSize: 1, concurrency: 2, claimIdle: .seconds(5))) {
            try await Task.sleep(for: .milliseconds(50))
            #expect(handler.handled.count == 2)
            #expect(stream.pending.count == 2)
            #expect(await Self.until { stream.ids.isEmpty })
        }
        #expect(handler.handled.count == 5)
    }

    // MARK: Typed messages

    static func dictionary(_ fields: [(name: String, value: [UInt8])]) -> [String: [UInt8]] {
        Dictionary(fields.map { ($0.name, $0.value) }, uniquingKeysWith: { _, last in last })
    }

    static func names(_ fields: [(name: String, value: [UInt8])]) -> [String] { fields.map(\.name) }
    static func texts(_ fields: [(name: String, value: [UInt8])]) -> [String] { fields.map { String(decoding: $0.value, as: UTF8.self) } }

    @Test func webhookEventsRoundTripInTheIngressFormat() throws {
        let event = WebhookEvent(
            account: "acc", actionID: "act", type: "updateCard", model: "L1", receivedMilliseconds: 1_700_000_000_123, body: Array(#"{"a":1}"#.utf8),
            confirm: true)
        #expect(Self.names(event.fields) == ["account", "action", "type", "model", "received", "body", "confirm"])
        #expect(Self.texts(event.fields).last == "1")
        #expect(WebhookEvent(fields: Self.dictionary(event.fields)) == event)
        #expect(WebhookEvent(fields: ["account": Array("a".utf8)]) == nil)  // no body
        #expect(WebhookEvent(fields: ["account": Array("a".utf8), "body": []])?.confirm == false)
    }

    @Test func pushRequestsRoundTripInTheirWireFormat() throws {
        let background = PushRequest.background(account: "acc", reason: .changes)
        #expect(Self.texts(background.fields) == ["acc", "background", "changes"])
        #expect(Self.names(background.fields) == ["account", "kind", "reason"])
        let alert = PushRequest(account: "acc", kind: .alert, reason: .conflict, conflictIDs: [3, 14], excludeDevice: "dev")
        #expect(Self.names(alert.fields) == ["account", "kind", "reason", "conflict_ids", "exclude_device"])
        #expect(Self.texts(alert.fields) == ["acc", "alert", "conflict", "3,14", "dev"])
        #expect(PushRequest(fields: Self.dictionary(alert.fields)) == alert)
        #expect(PushRequest(fields: Self.dictionary(background.fields)) == background)
        #expect(PushRequest(fields: ["kind": Array("alert".utf8)]) == nil)  // no account
        #expect(PushRequest(fields: ["account": Array("a".utf8), "kind": Array("alert".utf8)])?.reason == .conflict)
    }

    @Test func syncJobMessagesRoundTrip() throws {
        let message = SyncJobMessage(jobID: "j1", account: "acc", kind: .reconcile)
        #expect(Self.names(message.fields) == ["job", "account", "kind"])
        #expect(SyncJobMessage(fields: Self.dictionary(message.fields)) == message)
        #expect(SyncJobMessage(fields: ["account": Array("a".utf8)]) == nil)
    }

    @Test func deadLettersKeepTheOriginalFieldsApart() throws {
        var fields = Self.dictionary(WebhookEvent(account: "a", actionID: "x", type: nil, model: nil, receivedMilliseconds: nil, body: [1]).fields)
        fields["original_id"] = Array("7-0".utf8)
        fields["error"] = Array("broken\tno".utf8)
        fields["deliveries"] = Array("4".utf8)
        fields["failed_at"] = Array("99".utf8)
        let letter = StreamDeadLetter(id: "1-0", fields: fields)
        #expect(letter.originalID == "7-0" && letter.deliveries == 4 && letter.failedAt == 99)
        #expect(WebhookEvent(fields: letter.original)?.actionID == "x")
        #expect(letter.failure(as: TestFailure.self) == StreamFailure(.broken, "no"))
        #expect(Set(letter.original.keys) == ["account", "action", "body"])
    }
}
