import Foundation
import NIOHTTP1
import RoundupCore
import RoundupTesting
import Testing

/// The board's vocabulary (its first half): `GET /dailyroundup/lists/{id}` gives the board's labels
/// and Priority options with their levels, read from Trello; an option added after pairing is offered, stored, and
/// reaches the apps as itself rather than as "no priority". Through the real processes and the fake Trello.
@Suite(.serialized) struct BoardVocabularyTests {
    @Test(arguments: StoreBackend.available) func aListOffersItsBoardsLabelsAndPriorityOptionsAndLearnsANewOne(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        stack.trello.setBoardLabels(boardID: "Bvocab", [("l-home", "Home", "green"), ("l-work", "Work", nil)])
        stack.trello.setPriorityField(boardID: "Bvocab", fieldID: "F1", options: [("o-high", "High"), ("o-low", "Low")])
        let s = try await SyncSetup.make(stack, list: "Lvocab", board: "Bvocab")

        func options() async throws -> JSONValue {
            let list = try await stack.callAPI(.GET, "/dailyroundup/lists/\(s.listID)", token: s.token)
            #expect(list.status == .ok, "\(list.body)")
            return list.json
        }
        let first = try await options()
        #expect(
            first["labels"]
                == .array([
                    .object(["id": "l-home", "name": "Home", "color": "green"]), .object(["id": "l-work", "name": "Work", "color": .null]),
                ]), "\(first)")
        #expect(
            first["priority_options"]
                == .array([
                    .object(["id": "o-high", "text": "High", "level": .number(1)]), .object(["id": "o-low", "text": "Low", "level": .number(9)]),
                ]),
            "\(first)")
        // The page of lists stays without them (no Trello read per list).
        let page = try await stack.callAPI(.GET, "/dailyroundup/lists", token: s.token)
        #expect(page.json["lists"]?[0]?["labels"] == nil && page.json["lists"]?[0]?["priority_options"] == nil, "\(page.body)")

        // An option added on the board after pairing: offered, and a card that takes it reaches the apps with it.
        stack.trello.setPriorityField(boardID: "Bvocab", fieldID: "F1", options: [("o-high", "High"), ("o-med", "Medium"), ("o-low", "Low")])
        let second = try await options()
        #expect(second["priority_options"]?[1] == .object(["id": "o-med", "text": "Medium", "level": .number(5)]), "\(second)")
        let card = stack.trello.userCreateCard(listID: "Lvocab", name: "Call the bank")
        stack.trello.userSetPriority(cardID: card, fieldID: "F1", optionID: "o-med")
        #expect(
            try await TestSupport.eventually(timeout: .seconds(20)) {
                try await s.changes().contains { $0["trello_card_id"]?.stringValue == card && $0["fields"]?["priority"] == "medium" }
            })
        let change = try await s.changes().last { $0["trello_card_id"]?.stringValue == card }
        #expect(change?["fields"]?["priority_level"] == .number(5), "\(String(describing: change))")

        // Unknown list: 404 as for any other route.
        let missing = try await stack.callAPI(.GET, "/dailyroundup/lists/no-such-list", token: s.token)
        #expect(missing.status == .notFound)
        await stack.shutdown()
    }

    /// The second half: with no app asking for the list, a card that takes an option the stored field lacks makes the
    /// worker read the board's Priority field again, and the card reaches the apps with that option, not as "no
    /// priority"; a reconciliation reads the field again too.
    @Test(arguments: StoreBackend.available) func theWorkerLearnsAnOptionAddedAfterPairing(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        stack.trello.setPriorityField(boardID: "Bopt", fieldID: "F2", options: [("o-high", "High"), ("o-low", "Low")])
        let s = try await SyncSetup.make(stack, list: "Lopt", board: "Bopt")
        // The worker learns the field with a first card.
        let first = stack.trello.userCreateCard(listID: "Lopt", name: "First")
        stack.trello.userSetPriority(cardID: first, fieldID: "F2", optionID: "o-high")
        #expect(
            try await TestSupport.eventually(timeout: .seconds(20)) {
                try await s.changes().contains { $0["trello_card_id"]?.stringValue == first && $0["fields"]?["priority"] == "high" }
            })
        stack.trello.setPriorityField(boardID: "Bopt", fieldID: "F2", options: [("o-urgent", "Urgent"), ("o-high", "High"), ("o-low", "Low")])
        let card = stack.trello.userCreateCard(listID: "Lopt", name: "Pay the tax")
        stack.trello.userSetPriority(cardID: card, fieldID: "F2", optionID: "o-urgent")
        #expect(
            try await TestSupport.eventually(timeout: .seconds(20)) {
                try await s.changes().contains { $0["trello_card_id"]?.stringValue == card && $0["fields"]?["priority"] == "urgent" }
            })
        let change = try await s.changes().last { $0["trello_card_id"]?.stringValue == card }
        #expect(change?["fields"]?["priority_level"] == .number(1), "\(String(describing: change))")
        await stack.shutdown()
    }
}
