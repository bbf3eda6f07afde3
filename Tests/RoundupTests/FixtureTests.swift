import AsyncHTTPClient
import Foundation
import Logging
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupStreams
import RoundupTesting
import RoundupTrello
import RoundupWorker
import Testing

/// Every captured Trello body in ../shared/trello-fixtures, through the real worker path:
/// interpretation, the real Trello client against a fake Trello over HTTP, and a real SQLite store.
@Suite(.serialized) struct FixtureTests {
    /// file → (change type, changed fields); nil means "writes nothing".
    static let expected: [String: (String, [String])?] = [
        "addAttachmentToCard__TrelloDotNet.json": ("update", ["attachments", "url"]),
        "addChecklistToCard__TrelloDotNet.json": ("update", ["checklists"]),
        "addLabelToCard__TrelloDotNet.json": ("update", ["labels"]),
        // Read only for lists that filter by member; a list without a filter gets nothing.
        "addMemberToCard__TrelloDotNet.json": nil,
        "removeMemberFromCard__TrelloDotNet.json": nil,
        "createCard__2014__trello_tracker.json": ("create", SyncField.names.sorted()),
        "createCard__actionsflow.json": ("create", SyncField.names.sorted()),
        "deleteAttachmentFromCard__TrelloDotNet.json": ("update", ["attachments", "url"]),
        "deleteCard__2014__trello_tracker.json": ("delete", []),
        "removeChecklistFromCard__TrelloDotNet.json": ("update", ["checklists"]),
        "removeLabelFromCard__TrelloDotNet.json": ("update", ["labels"]),
        "updateCard__closed__2014__trello_tracker.json": ("delete", []),
        "updateCard__desc__TrelloDotNet.json": ("update", ["notes"]),
        "updateCard__desc__model-card__TrelloDotNet.json": ("update", ["notes"]),
        "updateCard__desc__model-list__TrelloDotNet.json": ("update", ["notes"]),
        "updateCard__dueComplete__TrelloDotNet.json": ("complete", ["completed"]),
        "updateCard__dueComplete__model-list__vacationWorker.json": ("complete", ["completed"]),
        // The due reminder reaches the apps (minutes before the due date): the payload carries it.
        "updateCard__dueReminder__TrelloDotNet.json": ("update", ["due_reminder_minutes"]),
        "updateCard__due__TrelloDotNet.json": ("update", ["due_date"]),
        "updateCard__idLabels_after_addLabel__TrelloDotNet.json": ("update", ["labels"]),
        "updateCard__idLabels_after_removeLabel__TrelloDotNet.json": ("update", ["labels"]),
        "updateCard__idList__2014__trello_tracker.json": ("create", SyncField.names.sorted()),
        "updateCard__idList__TrelloDotNet.json": ("create", SyncField.names.sorted()),
        "updateCard__idList__model-list__vacationWorker.json": ("create", SyncField.names.sorted()),
        "updateCard__idList__with-webhook-block__aruturu24.json": ("create", SyncField.names.sorted()),
        "updateCard__name__2014__trello_tracker.json": ("update", ["title"]),
        "updateCard__name__TrelloDotNet.json": ("update", ["title"]),
        "updateCard__name__model-list__unicode__vacationWorker.json": ("update", ["title"]),
        "updateCard__pos__TrelloDotNet.json": nil,
        "updateCard__start__TrelloDotNet.json": ("update", ["start_date"]),
        "updateCheckItemStateOnCard__TrelloDotNet.json": ("update", ["checklists"]),
    ]
    static let unhandled: Set<String> = [
        "voteOnCard__official-trello-docs-2015.json"
    ]

    static func fullBodies() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: TestSupport.fixturesDirectory.path).filter { $0.hasSuffix(".json") }.sorted()
    }

    @Test func everyBodyIsCovered() throws {
        let files = try Self.fullBodies()
        #expect(files.count >= 30)
        #expect(Set(files) == Set(Self.expected.keys).union(Self.unhandled))
    }

    @Test func everyBodyAndActionDecodes() throws {
        for file in try Self.fullBodies() {
            let data = try Data(contentsOf: TestSupport.fixturesDirectory.appendingPathComponent(file))
            let envelope = try JSONDecoder().decode(WebhookEnvelope.self, from: data)
            #expect(envelope.action?.id?.isEmpty == false || file.contains("2014") || file.contains("official"), "\(file)")
            let body = try TrelloWebhookBody.decode(data)
            #expect(body.action.type != nil || file.contains("custom"), "\(file)")
        }
        let actionOnly = TestSupport.fixturesDirectory.appendingPathComponent("action-only")
        for file in try FileManager.default.contentsOfDirectory(atPath: actionOnly.path) where file.hasSuffix(".json") {
            let body = try TrelloWebhookBody.decode(try Data(contentsOf: actionOnly.appendingPathComponent(file)))
            #expect(body.action.data?.card?["id"] != nil, "\(file)")
        }
    }

    @Test func unhandledTypesYieldNothing() throws {
        for file in Self.unhandled {
            let body = try TrelloWebhookBody.decode(try Data(contentsOf: TestSupport.fixturesDirectory.appendingPathComponent(file)))
            #expect(!TrelloActionType.handled.contains(body.action.type ?? ""))
            #expect(CardEventInterpreter.events(for: body).isEmpty)
        }
    }

    @Test(arguments: StoreBackend.available) func handledBodiesYieldTheExpectedChange(backend: StoreBackend) async throws {
        // The fixtures are read first: a missing one fails the test before there is an HTTP client to leave running
        // (AsyncHTTPClient traps when a client is released without its shutdown).
        let fixtures = try Self.expected.sorted(by: { $0.key < $1.key }).map { file, expectation in
            (file, expectation, try Data(contentsOf: TestSupport.fixturesDirectory.appendingPathComponent(file)))
        }
        let trello = try await FakeTrello.start()
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        let client = TrelloClient(baseURL: trello.baseURL, http: http, logger: Logger(label: "test"))
        for (file, expectation, raw) in fixtures {
            let body = try TrelloWebhookBody.decode(raw)
            let scenario = Scenario(body: body, raw: try JSONDecoder().decode(JSONValue.self, from: raw))
            let f = try await StoreFixture(backend, listID: scenario.listID, boardID: scenario.boardID)
            if !scenario.isCreation {
                _ = try await f.observe(scenario.cardID, .fields(CardMapper.fields(fromCard: scenario.before), full: true), at: 1_000_000_000)
                _ = try await f.store.acknowledge(accountID: f.account, acks: try await f.changes().map { ChangeAck(id: $0.id) })
            }
            trello.setCard(scenario.after)
            let processor = WebhookProcessor(store: f.store, cards: client, logger: Logger(label: "test"))
            let entry = StreamEntry(
                id: "1-0",
                fields: [
                    "account": Array(f.account.utf8), "action": Array((body.action.id ?? "a").utf8),
                    "type": Array((body.action.type ?? "").utf8), "body": Array(raw),
                ])
            let outcome = try await processor.process(entries: [entry])
            #expect(outcome.done == ["1-0"], "\(file): \(outcome.retry)")
            let changes = try await f.changes()
            if let (type, fields) = expectation {
                #expect(changes.count == 1, "\(file)")
                #expect(changes.first?.changeType.rawValue == type, "\(file)")
                #expect(changes.first?.changedFields == fields, "\(file)")
                #expect(changes.first?.trelloCardID == scenario.cardID, "\(file)")
            } else {
                #expect(changes.isEmpty, "\(file)")
            }
        }
        try await http.shutdown()
        await trello.stop()
    }
}

/// The card before and after a captured action, built from the action's own data.
struct Scenario {
    var cardID: String
    var listID: String
    var boardID: String
    var before: [String: JSONValue]
    var after: [String: JSONValue]
    var isCreation: Bool

    init(body: TrelloWebhookBody, raw: JSONValue) {
        let data = body.action.data!
        let type = body.action.type ?? ""
        let card = data.card ?? [:]
        cardID = card["id"]!.stringValue!
        let events = CardEventInterpreter.events(for: body)
        listID = events.last?.listID ?? data.listAfter?.id ?? data.list?.id ?? "fixture-list"
        boardID = data.board?.id ?? "fixture-board"
        var after = FakeTrello.card(id: cardID, listID: listID, boardID: boardID, name: card["name"]?.stringValue ?? "Card")
        for key in ["name", "desc", "due", "start", "dueComplete", "dueReminder", "idLabels", "closed"] where card[key] != nil {
            after[key] = card[key]
        }
        var before = after
        for (key, value) in data.old ?? [:] where key != "idList" { before[key] = value }
        isCreation = ["createCard", "copyCard", "convertToCardFromCheckItem", "moveCardToBoard"].contains(type) || data.old?["idList"] != nil
        switch type {
        case "addLabelToCard", "removeLabelFromCard":
            let label = JSONValue.string(raw["action"]?["data"]?["label"]?["id"]?.stringValue ?? "label-1")
            after["idLabels"] = .array(type == "addLabelToCard" ? [label] : [])
            before["idLabels"] = .array(type == "addLabelToCard" ? [] : [label])
        case "addChecklistToCard", "removeChecklistFromCard":
            let checklist = JSONValue.object(["id": .string("cl-1"), "name": .string("Steps"), "checkItems": .array([])])
            after["checklists"] = .array(type == "addChecklistToCard" ? [checklist] : [])
            before["checklists"] = .array(type == "addChecklistToCard" ? [] : [checklist])
        case "updateCheckItemStateOnCard":
            func list(_ state: String) -> JSONValue {
                .array([
                    .object([
                        "id": .string("cl-1"), "name": .string("Steps"),
                        "checkItems": .array([
                            .object(["id": .string("ci-1"), "name": .string("One"), "state": .string(state), "pos": .number(1)])
                        ]),
                    ])
                ])
            }
            after["checklists"] = list("complete")
            before["checklists"] = list("incomplete")
        case "addAttachmentToCard", "deleteAttachmentFromCard":
            let attachment = JSONValue.object(["id": .string("at-1"), "url": .string("https://example.com/doc"), "isUpload": .bool(false)])
            after["attachments"] = .array(type == "addAttachmentToCard" ? [attachment] : [])
            before["attachments"] = .array(type == "addAttachmentToCard" ? [] : [attachment])
        default:
            break
        }
        self.before = before
        self.after = after
    }
}
