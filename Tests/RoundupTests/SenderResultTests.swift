import Foundation
import NIOHTTP1
import RoundupCore
import RoundupTesting
import Testing

/// The client keeps its word: a card made or moved from the apps answers its Trello-only values in
/// the job's result for that item, so the device that sent it is not handed a change just to learn them; the account's
/// other devices are.
@Suite(.serialized) struct SenderResultTests {
    func pull(_ s: SyncSetup, device: String) async throws -> [JSONValue] {
        let response = try await s.stack.callAPI(.GET, "/dailyroundup/changes?device_id=\(device)", token: s.token)
        #expect(response.status == .ok, "\(response.body)")
        return response.json["changes"]?.arrayValue ?? []
    }

    @Test(arguments: StoreBackend.available) func aNewCardsTrelloValuesComeInTheResultAndTheOtherDevicesChange(backend: StoreBackend) async throws {
        let stack = try await SyncJobTests().startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lsender", board: "Bsender")
        stack.trello.setBoardLabels(boardID: "Bsender", [("lab-home", "Home", "green")])
        let devices = SeveralDevicesTests()
        try await devices.register(s, "iphone-1", platform: "ios")

        // Everything comes in the result; the sender is not handed the change that tells the other devices.
        let alone = try await s.sync([
            s.change("create", reminder: "R-alone", fields: ["title": "Buy stamps", "labels": .array(["Home"])], changed: ["title", "labels"])
        ])
        let first = try #require(alone["results"]?[0])
        #expect(first["status"] == "ok", "\(alone)")
        let card = try #require(first["trello_card_id"]?.stringValue)
        #expect(first["fields"]?["trello_url"]?.stringValue?.hasPrefix("https://trello.com/c/") == true, "\(first)")
        #expect(first["fields"]?["labels"] == .array([.object(["id": "lab-home", "name": "Home", "color": "green"])]), "\(first)")
        try await stack.quiet()
        #expect(try await pull(s, device: "iphone-1").isEmpty, "the sender is sent nothing it already learned")
        // The server knows them, for a device that comes later.
        let cards = try await stack.callAPI(.GET, "/dailyroundup/lists/\(s.listID)/cards", token: s.token)
        let listed = cards.json["cards"]?.arrayValue?.first { $0["trello_card_id"]?.stringValue == card }
        #expect(listed?["fields"]?["trello_url"] == first["fields"]?["trello_url"], "\(cards.body)")

        // With a second device: the sender still learns from its result and is not handed the change; the Mac is.
        try await devices.register(s, "mac-1", platform: "macos")
        let shared = try await s.sync([s.change("create", reminder: "R-shared", fields: ["title": "Post the letter"], changed: ["title"])])
        let second = try #require(shared["results"]?[0])
        let secondCard = try #require(second["trello_card_id"]?.stringValue)
        #expect(second["fields"]?["trello_url"]?.stringValue?.isEmpty == false, "\(second)")
        try await stack.quiet()
        #expect(try await pull(s, device: "iphone-1").isEmpty)
        // The Mac gets what both items told (a device that was not there when the first was made is told too).
        let mac = try await pull(s, device: "mac-1")
        #expect(Set(mac.compactMap { $0["trello_card_id"]?.stringValue }) == [card, secondCard], "\(mac)")
        let told = mac.first { $0["trello_card_id"]?.stringValue == secondCard }
        #expect(told?["change_type"] == "update" && told?["fields"]?["trello_url"] == second["fields"]?["trello_url"], "\(mac)")
        // A pull without a device sees every change, as before.
        #expect(try await s.changes().count == 2)
    }
}
