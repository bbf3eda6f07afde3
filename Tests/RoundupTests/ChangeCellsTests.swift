import Foundation
import GRDB
import NIOCore
import RoundupCore
import RoundupTesting
import Testing

@testable import RoundupAPI
@testable import RoundupSQLite
@testable import RoundupStore

/// The changes page and the stream write each change from the store's bytes (`PendingChangeCells`), not from
/// `String`s: what the apps get must be what the strings gave, whatever the text holds, and valid JSON even where a
/// store holds bytes that are not UTF-8.
@Suite struct ChangeCellsTests {
    static let titles = [
        "plain", "é😀 ünïcödé", "a \"quote\" and a \\backslash", "line\nbreak\r\ttab", "\u{1}\u{1f}\u{7f}",
        String(repeating: "long ", count: 400), "日本語のカード", "",
    ]

    /// What `ChangeRoutes.write` made of a change before it was written from cells: the same JSON, from `String`s.
    static func expected(_ change: PendingChange) -> JSONValue {
        .object([
            "id": .number(Double(change.id)), "change_type": .string(change.changeType.rawValue), "sync_list_id": .string(change.syncListID),
            "trello_card_id": .string(change.trelloCardID), "reminder_id": change.reminderID.map(JSONValue.string) ?? .null,
            "changed_fields": try! JSONParser.parse(Array(change.changedFieldsJSON.utf8)),
            "fields": try! JSONParser.parse(Array(change.fieldsJSON.utf8)), "created_at": .string(change.createdAt),
        ])
    }

    /// Every title on both stores: the page (in pages of three, `has_more` where more wait) and the stream's events
    /// say what the kept `PendingChange`s say.
    @Test(arguments: StoreBackend.available) func aPageWrittenFromCellsSaysWhatTheStringsSay(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        for (index, title) in Self.titles.enumerated() {
            _ = try await f.observe("card-\(index)", .fields(fullCard(title), full: true), at: 1_700_000_000 + Double(index))
        }
        let kept = try await f.changes()
        #expect(kept.count == Self.titles.count)
        #expect(kept.map { $0.fields["title"]?.stringValue } == Self.titles.map(Optional.some))
        _ = try await f.store.acknowledge(accountID: f.account, acks: [ChangeAck(id: kept[1].id, reminderID: "R-ü")])
        _ = try await f.observe("card-1", .fields(["title": .string("renamed ✓")], full: false), at: 1_700_000_100)
        let all = try await f.changes()

        var pages: [JSONValue] = []
        var after: Int64 = 0
        while true {
            var page = try await f.store.pendingChanges(accountID: f.account, afterID: after, limit: 4, into: ChangeRoutes.ChangePage(limit: 3))
            let body = page.finish()
            let json = try JSONParser.parse(Array(body.readableBytesView))
            let changes = try #require(json["changes"]?.arrayValue)
            pages += changes
            let more = json["has_more"] == .bool(true)
            #expect(more == (pages.count < all.count))
            guard more,
                let last = all.first(where: { Double($0.id) == changes.last?["id"].flatMap { if case .number(let n) = $0 { n } else { nil } } })
            else { break }
            after = last.id
        }
        #expect(pages == all.map(Self.expected))
        #expect(pages.contains { $0["reminder_id"] == "R-ü" && $0["fields"]?["title"] == "renamed ✓" })

        let events = try await f.store.pendingChanges(accountID: f.account, afterID: 0, limit: 200, into: ChangeRoutes.ChangeEvents())
        #expect(events.count == all.count && events.last == all.last?.id)
        let text = String(decoding: events.out.readableBytesView, as: UTF8.self)
        let data = text.components(separatedBy: "\n\n").filter { !$0.isEmpty }.map { event in
            event.components(separatedBy: "\n").first { $0.hasPrefix("data: ") }.map { String($0.dropFirst(6)) } ?? ""
        }
        #expect(try data.map { try JSONParser.parse(Array($0.utf8)) } == all.map(Self.expected))
        #expect(text.hasPrefix("id: \(all[0].id)\nevent: change\ndata: {"))

        // No change after the last: an empty page, still a whole document.
        var empty = try await f.store.pendingChanges(accountID: f.account, afterID: all.last!.id, limit: 4, into: ChangeRoutes.ChangePage(limit: 3))
        let emptyJSON = try JSONParser.parse(Array(empty.finish().readableBytesView))
        #expect(emptyJSON["changes"] == .array([]) && emptyJSON["has_more"] == .bool(false))
    }

    /// The change types as their stored bytes: every type, each by its own raw value, and nothing else; a move is
    /// stored as an update (with the list it left), so "move" is no stored text.
    @Test func everyChangeTypeReadsFromItsBytes() throws {
        #expect(
            ChangeType.storedTexts.map(\.0).sorted { $0.rawValue < $1.rawValue }
                == ChangeType.allCases.filter { $0 != .move }.sorted { $0.rawValue < $1.rawValue })
        #expect(ChangeType.move.storedName == "update" && ChangeType.create.storedName == "create")
        for type in ChangeType.allCases + [nil] {
            for text in [
                type?.rawValue ?? "created", (type?.rawValue ?? "") + "x", String((type?.rawValue ?? "xy").dropLast()),
                type?.rawValue.uppercased() ?? "",
            ] {
                let bytes = Array(text.utf8)
                let read = bytes.withUnsafeBufferPointer { try? ChangeType.stored(UTF8Cell($0)) }
                #expect(read == ChangeType(rawValue: text).flatMap { $0 == .move ? nil : $0 }, "\(text)")
            }
        }
    }

    /// SQLite keeps whatever bytes it is given. A change whose text is not UTF-8 (written by something other than this
    /// server) still reaches the apps as valid JSON, each invalid sequence replaced by U+FFFD as `String` would.
    @Test func bytesThatAreNotUTF8AreRepairedNotPassedOn() async throws {
        let f = try await StoreFixture(.sqlite)
        _ = try await f.observe("card-1", .fields(fullCard("ok"), full: true))
        let sqlite = try #require(f.store as? SQLiteStore)
        // "ab\xFF" in the card id, an overlong '/' (C0 AF) and a lone surrogate (ED A0 80) inside the fields' title,
        // after more than eight ASCII bytes (the word-at-a-time check), and a cut-off sequence ending the created_at.
        try await sqlite.pool.write { db in
            try db.execute(
                sql: """
                    UPDATE pending_changes SET trello_card_id = CAST(X'6162FF' AS TEXT),
                      fields = CAST(X'7B227469746C65223A2261626364656667686920C0AF20EDA080227D' AS TEXT),
                      created_at = CAST(X'323032362D31312D3236F09F98' AS TEXT)
                    """)
        }
        let kept = try #require(try await f.changes().first)
        #expect(kept.trelloCardID == "ab\u{FFFD}")
        #expect(kept.fields["title"] == .string("abcdefghi \u{FFFD}\u{FFFD} \u{FFFD}\u{FFFD}\u{FFFD}"))
        var page = try await f.store.pendingChanges(accountID: f.account, afterID: 0, limit: 2, into: ChangeRoutes.ChangePage(limit: 1))
        let body = Data(page.finish().readableBytesView)
        #expect(String(data: body, encoding: .utf8) != nil, "the page is valid UTF-8")
        let object = try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any])
        let change = try #require((object["changes"] as? [[String: Any]])?.first)
        #expect(change["trello_card_id"] as? String == kept.trelloCardID)
        #expect((change["fields"] as? [String: Any])?["title"] as? String == kept.fields["title"]?.stringValue)
        #expect(change["created_at"] as? String == kept.createdAt)
        #expect(try JSONParser.parse(Array(body))["changes"]?.arrayValue == [Self.expected(kept)])
    }
}
