import Foundation
import Logging
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupStreams
import RoundupTesting
import RoundupTrello
import Testing

@testable import RoundupWorker

/// A batch of several accounts is processed in lanes of whole accounts at once (`WebhookProcessor.accountLanes`).
@Suite struct WebhookLanesTests {
    /// Cards Trello no longer has: no entry here needs one.
    struct NoCards: CardSource {
        func card(id: String, credentials: TrelloCredentials) async throws -> [String: JSONValue]? { nil }
        func priorityField(boardID: String, credentials: TrelloCredentials) async throws -> PriorityField? { nil }
        func openCards(listID: String, before: String?, limit: Int, credentials: TrelloCredentials) async throws -> [[String: JSONValue]] { [] }
    }

    static func entry(_ id: String, account: String) -> StreamDelivery {
        StreamDelivery(id: id, fields: ["account": Array(account.utf8), "body": Array("{}".utf8)])
    }

    static func lanes(_ entries: [StreamDelivery], count: Int) -> [[StreamDelivery]] {
        WebhookProcessor.lanes(entries, count: count) { String(decoding: $0.fields["account"] ?? [], as: UTF8.self) }
    }

    @Test func lanesKeepEachAccountWholeAndInOrder() {
        // Interleaved: A five times, B three, C twice, D once.
        let accounts = ["A", "B", "A", "C", "A", "B", "D", "A", "C", "B", "A"]
        let entries = accounts.enumerated().map { Self.entry("1-\($0.offset)", account: $0.element) }
        let lanes = Self.lanes(entries, count: 2)
        #expect(lanes.count == 2)
        #expect(lanes.map(\.count) == [6, 5], "A (5) and D (1) in one lane, B (3) and C (2) in the other")
        for lane in lanes {
            // Each lane keeps the batch's order, and an account is in one lane only.
            let positions = lane.map { entries.firstIndex(of: $0)! }
            #expect(positions == positions.sorted())
            for other in lanes where other != lane {
                #expect(Set(lane.map { $0.fields["account"]! }).isDisjoint(with: other.map { $0.fields["account"]! }))
            }
        }
        #expect(Set(lanes.flatMap { $0 }.map(\.id)) == Set(entries.map(\.id)))
        // One lane when there is one account, or one lane allowed; never more lanes than accounts.
        #expect(Self.lanes(entries, count: 1) == [entries])
        #expect(Self.lanes(entries.filter { $0.fields["account"] == Array("A".utf8) }, count: 4).count == 1)
        #expect(Self.lanes(entries, count: 16).count == 4)
    }

    /// Two accounts' renames of known cards, interleaved in one batch: processed in two lanes, the store ends as it
    /// does processed in one, on each back end.
    @Test(arguments: StoreBackend.available) func aBatchInLanesEndsAsInOne(backend: StoreBackend) async throws {
        func run(lanes: Int) async throws -> (outcome: BatchOutcome, changes: [String: [String]]) {
            let (store, _) = try await TestStore.make(backend, "lanes")
            var accounts: [String] = []
            for n in 0..<3 {
                let account = try await store.createAccount(authTokenHash: UUID().uuidString)
                try await store.updateAccountCredentials(id: account, apiKey: "key", token: "token-\(n)", webhookSecret: "secret")
                let list = try await store.createSyncList(accountID: account, name: "List", trelloBoardID: "B1", trelloListID: "L1")
                _ = try await store.apply(
                    (0..<4).map { c in
                        CardObservation(
                            accountID: account, syncListID: list.id, cardID: "card-\(c)", actionID: nil,
                            actionDate: Date(timeIntervalSince1970: 1_600_000_000), kind: .fields(fullCard("Card \(c)"), full: true))
                    })
                let ids = try await store.pendingChanges(accountID: account, afterID: 0, limit: 100).map(\.id)
                _ = try await store.acknowledge(accountID: account, acks: ids.map { ChangeAck(id: $0) })
                accounts.append(account)
            }
            var entries: [StreamDelivery] = []
            for i in 0..<36 {
                let account = accounts[(i * 7) % 3]
                let card = "card-\(i % 4)"
                let date = Timestamp.string(Date(timeIntervalSince1970: 1_700_000_000 + Double(i)))
                let body = WebhookBodies.body(
                    type: "updateCard", actionID: "act-\(i)", cardID: card, listID: "L1", boardID: "B1", card: ["name": .string("Renamed \(i)")],
                    old: ["name": .string("Before")], date: date)
                let event = WebhookEvent(account: account, actionID: "act-\(i)", type: "updateCard", model: "L1", receivedMilliseconds: 0, body: body)
                entries.append(StreamDelivery(id: "1-\(i)", fields: Dictionary(event.fields.map { ($0.name, $0.value) }) { _, last in last }))
            }
            let processor = WebhookProcessor(
                store: store, cards: NoCards(), logger: Logger(label: "test"), accountLanes: lanes)
            let outcome = try await processor.process(entries: entries)
            var changes: [String: [String]] = [:]
            for (n, account) in accounts.enumerated() {
                changes["account \(n)"] = try await store.pendingChanges(accountID: account, afterID: 0, limit: 100).map {
                    "\($0.trelloCardID) \($0.changeType) \($0.fieldsJSON)"
                }
            }
            return (outcome, changes)
        }
        let one = try await run(lanes: 1)
        let two = try await run(lanes: 2)
        #expect(one.outcome.retry.isEmpty)
        #expect(Set(two.outcome.done) == Set(one.outcome.done) && one.outcome.done.count == 36)
        #expect(two.outcome.changesWritten == one.outcome.changesWritten)
        #expect(two.outcome.accountsWithChanges.count == 3)
        #expect(two.changes == one.changes)
        #expect(one.changes.values.allSatisfy { $0.count == 4 }, "each account's four cards end with one change each: \(one.changes)")
    }
}
