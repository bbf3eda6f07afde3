import Foundation
import RoundupCore
import RoundupTesting
import Testing

/// A backlog of new cards in one list (a list copied, an automation, an hour of outage) is read a list page at a time,
/// not a card at a time, and reaches the apps whole.
@Suite(.serialized) struct BulkReadTests {
    @Test(arguments: StoreBackend.available) func aBacklogOfNewCardsIsReadWithTheList(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        stack.trello.setBoardLabels(boardID: "Bbulk", [("lab-1", "Home", "green")])
        let s = try await SyncSetup.make(stack, list: "Lbulk", board: "Bbulk", listSettings: .object(["initial": "new_cards"]))
        // 300 cards made while no worker runs: their webhooks wait in the stream.
        var cards: [String] = []
        for n in 1...300 { cards.append(stack.trello.userCreateCard(listID: "Lbulk", name: "Card \(n)", desc: "bulk \(n)")) }
        stack.trello.userSetLabel(cardID: cards[7], labelID: "lab-1", on: true)
        stack.trello.userAddChecklist(cardID: cards[7], name: "Steps", items: ["one"])
        await stack.trello.waitForWebhookDeliveries()
        let readsBefore = stack.trello.cardRequests
        try await stack.startWorker(name: "w1")
        try await stack.quiet()
        let changes = try await s.changes()
        #expect(changes.count == 300, "\(changes.count) changes")
        #expect(Set(changes.compactMap { $0["trello_card_id"]?.stringValue }) == Set(cards))
        // Each change holds what a read of the card alone gives.
        let labelled = try #require(changes.first { $0["trello_card_id"]?.stringValue == cards[7] })
        let card = try #require(stack.trello.cardValue(cards[7]))
        for (field, value) in CardMapper.fields(fromCard: card) where field != SyncField.priorityLevel && field != SyncField.priority {
            #expect(labelled["fields"]?[field] == value, "\(field)")
        }
        let cardReads = stack.trello.cardRequests - readsBefore
        let listReads = stack.trello.listReads("Lbulk")
        #expect(listReads >= 1 && cardReads < 30, "\(cardReads) card reads, \(listReads) list reads for 300 cards")
        print("bulk reads (\(backend)): 300 new cards read with \(listReads) list reads and \(cardReads) card reads")
        await stack.shutdown()
    }
}
