import Foundation
import Logging
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupTesting
import RoundupTrello
import RoundupWorker
import Testing

/// The worker decodes the batch its consumer fetched ahead while the batch before it is in the store
/// (`WebhookProcessor.readAhead`); `process` takes those readings instead of decoding again. That a batch read ahead
/// means what it means without is `randomMembershipChangesInsideOneBatchEndWhereOneByOneProcessingEnds` (every other seed
/// reads ahead); here, that the readings are taken, once, and that only the last two batches read ahead are kept.
@Suite struct WebhookReadAheadTests {
    /// Cards Trello no longer has: no entry here needs one.
    struct NoCards: CardSource {
        func card(id: String, credentials: TrelloCredentials) async throws -> [String: JSONValue]? { nil }
        func priorityField(boardID: String, credentials: TrelloCredentials) async throws -> PriorityField? { nil }
        func openCards(listID: String, before: String?, limit: Int, credentials: TrelloCredentials) async throws -> [[String: JSONValue]] { [] }
    }

    static func entry(_ id: String, account: String, body: [UInt8]) -> StreamDelivery {
        StreamDelivery(
            id: id, fields: ["account": Array(account.utf8), "action": Array("a-\(id)".utf8), "type": Array("updateCard".utf8), "body": body])
    }

    static func rename(_ id: String, account: String) -> StreamDelivery {
        let body = WebhookBodies.body(
            type: "updateCard", actionID: "a-\(id)", cardID: "card-\(id)", listID: "L1", boardID: "B1", card: ["name": "Renamed"],
            old: ["name": "Before"])
        return entry(id, account: account, body: body)
    }

    /// The same ids with bodies that do not decode: processed as they are, each is undecodable.
    static func garbled(_ entries: [StreamDelivery], account: String) -> [StreamDelivery] {
        entries.map { entry($0.id, account: account, body: Array("{not json".utf8)) }
    }

    @Test func entriesReadAheadAreDecodedOnceAndTakenOnce() async throws {
        let f = try await StoreFixture(.sqlite, listID: "L1", boardID: "B1")
        let processor = WebhookProcessor(store: f.store, cards: NoCards(), logger: Logger(label: "test"))
        let batch = (1...3).map { Self.rename("1-\($0)", account: f.account) }
        processor.readAhead(batch)
        // Garbled under the same ids: the readings made ahead are what is processed.
        let ahead = await processor.process(Self.garbled(batch, account: f.account))
        #expect(ahead.poison.isEmpty, "\(ahead.poison)")
        #expect(Set(ahead.done) == Set(batch.map(\.id)), "\(ahead.done) \(ahead.retry)")
        // Taken: the same ids again are decoded now.
        let again = await processor.process(Self.garbled(batch, account: f.account))
        #expect(again.poison.map(\.id) == batch.map(\.id))
    }

    @Test func onlyTheLastTwoBatchesReadAheadAreKept() async throws {
        let f = try await StoreFixture(.sqlite, listID: "L1", boardID: "B1")
        let processor = WebhookProcessor(store: f.store, cards: NoCards(), logger: Logger(label: "test"))
        let batches = (1...3).map { b in (1...2).map { Self.rename("\(b)-\($0)", account: f.account) } }
        for batch in batches { processor.readAhead(batch) }
        let first = await processor.process(Self.garbled(batches[0], account: f.account))
        #expect(first.poison.map(\.id) == batches[0].map(\.id), "the oldest batch read ahead was still kept")
        for batch in batches.dropFirst() {
            let kept = await processor.process(Self.garbled(batch, account: f.account))
            #expect(kept.poison.isEmpty, "\(kept.poison)")
        }
    }
}
