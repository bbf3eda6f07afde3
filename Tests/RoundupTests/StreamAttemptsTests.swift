import Foundation
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

/// Each failed delivery of a webhook entry is kept (when, by which consumer, with what error; the last
/// `StreamAttempt.kept`), carried by its dead letter, and forgotten with the entry: the scripts on a real Redis, with
/// and without the stream's load (the two ways an entry is settled).
@Suite(.serialized) struct StreamAttemptsTests {
    @Test(arguments: [false, true]) func attemptsAreKeptBoundedCarriedByTheDeadLetterAndForgotten(keepsLoad: Bool) async throws {
        let redis = try await TestRedis.make()
        let shard = WebhookShard(index: 3)
        let stream = redis.keys.webhookStream(shard)
        let errors = redis.keys.webhookErrors(shard)
        let driver = RedisStreamDriver(
            redis: redis.client, stream: stream, group: "workers", consumer: "worker-a", errors: errors,
            deadLetters: .init(stream: redis.keys.deadLetterStream(shard), maxCount: 100, maxAge: .seconds(3600)),
            load: keepsLoad ? StreamLoad(key: redis.keys.webhookLoad(shard), ownerField: "account", sizeField: "body") : nil)
        try await driver.prepare()
        for action in ["A-1", "A-2", "A-3"] {
            _ = try await redis.client.send("XADD", RedisArgument(stream), "*", "account", "acc", "action", RedisArgument(action), "body", "{}")
        }
        let ids = try await driver.read(count: 10, block: nil).map(\.id)
        try #require(ids.count == 3)
        let (failing, poison, recovering) = (ids[0], ids[1], ids[2])

        // The first fails more often than attempts are kept: its last ones stay, oldest first, the last error beside.
        let failures = StreamAttempt.kept + 2
        for round in 1...failures {
            #expect(try await driver.settle(done: [], failed: [(failing, "broken\tround \(round)")], appends: []) == 0)
        }
        #expect(try await driver.recordedErrors([failing]) == ["broken\tround \(failures)"])
        _ = try await driver.deadLetter(failing, deliveries: failures, error: "delivered too often")

        // The second is given up at once with a reason over two lines: one attempt, by this consumer, on one line.
        _ = try await driver.deadLetter(poison, deliveries: 1, error: "poison\tnot an event\nsecond line")

        // The third fails once, then succeeds: nothing of it stays.
        _ = try await driver.settle(done: [], failed: [(recovering, "broken\tonce")], appends: [])
        #expect(try await redis.client.send("HLEN", RedisArgument(errors)).int == 2)  // its error and its attempts
        _ = try await driver.settle(done: [recovering], failed: [], appends: [])
        #expect(try await redis.client.send("HLEN", RedisArgument(errors)).int == 0)

        let letters = try await redis.client.send("XRANGE", RedisArgument(redis.keys.deadLetterStream(shard)), "-", "+").streamEntries.map {
            StreamDeadLetter(id: $0.id, fields: $0.fields)
        }
        try #require(letters.count == 2)
        let kept = letters[0].attempts
        #expect(letters[0].error == "broken\tround \(failures)")
        #expect(kept.count == StreamAttempt.kept)
        #expect(kept.map(\.error) == (3...failures).map { "broken\tround \($0)" })
        #expect(kept.allSatisfy { $0.consumer == "worker-a" })
        let now = Int(Date().timeIntervalSince1970 * 1000)
        #expect(kept.allSatisfy { now - 60_000 < $0.at && $0.at <= now } && kept.map(\.at) == kept.map(\.at).sorted())
        #expect(letters[0].original["action"].map { String(decoding: $0, as: UTF8.self) } == "A-1")
        #expect(letters[0].original["attempts"] == nil)

        #expect(letters[1].attempts.count == 1)
        #expect(letters[1].attempts.first?.consumer == "worker-a")
        #expect(letters[1].attempts.first?.error == "poison\tnot an event second line")
        await redis.shutdown()
    }
}
