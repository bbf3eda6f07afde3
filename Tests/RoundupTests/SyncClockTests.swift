import Foundation
import RoundupCore
import RoundupStore
import Testing

@testable import RoundupAPI

/// `lww` on the server's clock: a change's `modified_at` later than the moment the server received it (a device clock
/// running ahead) is taken as that moment; an earlier one is kept.
@Suite struct SyncClockTests {
    static func change(modifiedAt: String) throws -> SyncChange {
        let value = JSONValue.object([
            "op": "update", "sync_list_id": "L1", "reminder_id": "R1", "fields": .object(["title": "x"]), "changed_fields": .array(["title"]),
            "modified_at": .string(modifiedAt),
        ])
        return try SyncChange(value, path: "changes[0]", lists: ["L1"])
    }

    @Test func aModifiedAtAheadOfTheServerIsTakenAsTheMomentItArrived() throws {
        let received = try #require(Timestamp.date("2026-11-26T12:00:00Z"))
        #expect(try Self.change(modifiedAt: "2099-01-01T00:00:00Z").item(received: received).modifiedAt == received)
        #expect(try Self.change(modifiedAt: "2026-11-26T12:00:05Z").item(received: received).modifiedAt == received)
        let earlier = try #require(Timestamp.date("2026-11-26T11:59:00Z"))
        #expect(try Self.change(modifiedAt: "2026-11-26T11:59:00Z").item(received: received).modifiedAt == earlier)
    }
}
