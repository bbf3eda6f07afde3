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
        for (field, value) in CardMapper.fields(fromCard: card)
        where field != SyncField.priorityLevel.rawValue && field != SyncField.priority.rawValue {
            #expect(labelled["fields"]?[field] == value, "\(field)")
        }
        let cardReads = stack.trello.cardRequests - readsBefore
        let listReads = stack.trello.listReads("Lbulk")
        #expect(listReads >= 1 && cardReads < 30, "\(cardReads) card reads, \(listReads) list reads for 300 cards")
        print("bulk reads (\(backend)): 300 new cards read with \(listReads) list reads and \(cardReads) card reads")
        await stack.shutdown()
    }

    /// A backlog longer than a batch: the first batch reads the list, the batches after it take their cards from that
    /// read (their events are older than it), not from more reads; an edit made after the read is read anew, never
    /// answered from it.
    @Test(arguments: StoreBackend.available) func aBacklogLongerThanABatchIsReadWithTheListOnce(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        // 600 events of one account wait at once: past its default share of its shard (500) and its bucket. Real Trello
        // retries a refused delivery for minutes, the fake for 300 ms; this test is about the worker's reads, so the
        // account may hold its whole backlog (FairWebhooksTests is about the share).
        try await stack.startIngress(extra: ["ROUNDUP_WEBHOOK_ACCOUNT_BACKLOG": "0", "ROUNDUP_WEBHOOK_ACCOUNT_RATE": "0"])
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Lback", board: "Bback", listSettings: .object(["initial": "new_cards"]))
        var cards: [String] = []
        for n in 1...600 { cards.append(stack.trello.userCreateCard(listID: "Lback", name: "Card \(n)", desc: "backlog \(n)")) }
        await stack.trello.waitForWebhookDeliveries()
        // The worker was down a while: every event waiting is older than the read that will serve it.
        try await Task.sleep(for: .seconds(6))
        let readsBefore = stack.trello.cardRequests
        try await stack.startWorker(name: "w1", extra: ["ROUNDUP_WORKER_BATCH": "100"])
        try await stack.quiet()
        var changes: [JSONValue] = []
        while true {
            let page = try await s.changes()
            changes += page
            // Acked, so the next page shows the rest (creates mapped to "R-<card>").
            try await s.ack(
                page, reminders: Dictionary(uniqueKeysWithValues: page.compactMap { $0["trello_card_id"]?.stringValue }.map { ($0, "R-\($0)") }))
            if page.count < 500 { break }
        }
        #expect(changes.count == 600 && Set(changes.compactMap { $0["trello_card_id"]?.stringValue }) == Set(cards), "\(changes.count) changes")
        #expect(
            changes.allSatisfy { change in
                guard let id = change["trello_card_id"]?.stringValue, let card = stack.trello.cardValue(id) else { return false }
                return change["fields"]?["title"] == card["name"] && change["fields"]?["notes"] == card["desc"]
            })
        let cardReads = stack.trello.cardRequests - readsBefore
        let listReads = stack.trello.listReads("Lback")
        #expect(listReads <= 2 && cardReads < 10, "\(cardReads) card reads, \(listReads) list reads for 600 cards in batches of 100")
        print("bulk reads (\(backend)): a backlog of 600 new cards in batches of 100 read with \(listReads) list reads and \(cardReads) card reads")

        // Edits made now, within the read's lifetime, are newer than it: each is read anew and reaches the apps.
        // (A location: its webhook names no value, so the card is read.)
        for card in cards.prefix(12) { stack.trello.userUpdateCard(id: card, ["locationName": "Office"]) }
        try await stack.quiet()
        let edits = try await s.changes()
        #expect(edits.count == 12 && edits.allSatisfy { $0["fields"]?["location"]?["name"] == "Office" }, "\(edits)")
        await stack.shutdown()
    }
}
