import Foundation
import RoundupCore
import RoundupStreams
import Testing

@testable import RoundupStore
@testable import RoundupWorker

/// The webhook batch planner (`BatchPlanner`) without Trello or a database: which cards a batch reads, and what each
/// entry observes once they are read, walking the batch in order as processing it one entry at a time would.
@Suite struct BatchPlannerTests {
    static let account = "a1"
    static let list = SyncListRecord(id: "sl1", accountID: account, name: "Inbox", trelloBoardID: "board1", trelloListID: "tl1")
    static let otherList = SyncListRecord(id: "sl2", accountID: account, name: "Later", trelloBoardID: "board1", trelloListID: "tl2")

    static func context(tasks: [String: TaskState] = [:]) -> BatchContext {
        var context = BatchContext()
        context.lists = [AccountScoped(account, "tl1"): list, AccountScoped(account, "tl2"): otherList]
        context.boards = [AccountScoped(account, "board1")]
        for (card, task) in tasks { context.tasks[AccountScoped(account, card)] = task }
        return context
    }

    static func entry(_ id: String, account: String = account, _ events: [CardEvent], date: Double = 1_000) -> Delivered<WebhookReading> {
        Delivered(
            id: id,
            message: WebhookReading(
                account: account, type: "updateCard", actionID: "act-\(id)", date: Date(timeIntervalSince1970: date), events: events,
                boardID: "board1"))
    }

    static func edit(_ card: String, list: String? = "tl1", _ fields: [String: JSONValue] = ["title": "new"]) -> CardEvent {
        CardEvent(cardID: card, listID: list, boardID: "board1", kind: .fields(fields))
    }

    static func card(in list: String?, closed: Bool = false) -> WebhookProcessor.FetchedCard {
        WebhookProcessor.FetchedCard(fields: ["title": "whole"], listID: list, closed: closed, facts: CardFacts())
    }

    let live = TaskState(syncListID: "sl1", deleted: false)

    @Test func anEditOfACardLiveInItsListIsAppliedFromThePayloadWithoutARead() {
        let planner = BatchPlanner(context: Self.context(tasks: ["c1": live]))
        let batch = [Self.entry("1-0", [Self.edit("c1")])]
        #expect(planner.reads(batch).isEmpty)
        let observed = planner.observations(batch, fetched: [:])
        #expect(observed.applied == ["1-0"])
        #expect(observed.observations.map(\.kind) == [.fields(["title": "new"], full: false)])
        #expect(observed.observations.first?.syncListID == "sl1")
    }

    @Test func aCardNotSeenYetIsReadWholeWithItsBoardAndList() {
        let planner = BatchPlanner(context: Self.context())
        let batch = [Self.entry("1-0", [Self.edit("c1")], date: 1_000), Self.entry("2-0", [Self.edit("c1")], date: 2_000)]
        let reads = planner.reads(batch)
        let want = reads[AccountScoped(Self.account, "c1")]
        #expect(reads.count == 1)
        #expect(want?.board == "board1" && want?.list == "tl1" && want?.order == 0)
        // The read must hold every event of the card in the batch: the latest one's date.
        #expect(want?.latest == Date(timeIntervalSince1970: 2_000))
    }

    @Test func aCardInAListNoOneSyncsIsNothingToDo() {
        let planner = BatchPlanner(context: Self.context())
        let batch = [Self.entry("1-0", [Self.edit("c9", list: "unsynced")])]
        #expect(planner.reads(batch).isEmpty)
        let observed = planner.observations(batch, fetched: [:])
        #expect(observed.dropped == ["1-0"] && observed.applied.isEmpty && observed.observations.isEmpty)
    }

    @Test func afterARemovalInTheBatchTheCardsNextEditIsReadNotTakenFromItsPayload() {
        let planner = BatchPlanner(context: Self.context(tasks: ["c1": live]))
        let removal = CardEvent(cardID: "c1", listID: "tl1", boardID: "board1", kind: .removed)
        let batch = [Self.entry("1-0", [removal]), Self.entry("2-0", [Self.edit("c1")])]
        #expect(planner.reads(batch).keys.map(\.id) == ["c1"])
        // Trello has it back in the list: the removal, then the card whole.
        let observed = planner.observations(batch, fetched: [AccountScoped(Self.account, "c1"): .success(Self.card(in: "tl1"))])
        #expect(observed.applied == ["1-0", "2-0"])
        #expect(observed.observations.map(\.kind) == [.removed, .fields(["title": "whole"], full: true)])
    }

    /// A read card is observed where Trello has it: in a synced list whole, else removed from every list it was known in.
    @Test(arguments: [
        (WebhookProcessor.FetchedCard?.some(BatchPlannerTests.card(in: "tl2")), ["sl2"], true),
        (BatchPlannerTests.card(in: "tl1", closed: true), ["sl1"], false),
        (BatchPlannerTests.card(in: "elsewhere"), ["sl1"], false),
        (nil, ["sl1"], false),
    ])
    func aReadCardIsObservedWhereTrelloHasIt(_ fetched: WebhookProcessor.FetchedCard?, lists: [String], whole: Bool) {
        let planner = BatchPlanner(context: Self.context(tasks: ["c1": TaskState(syncListID: "sl1", deleted: false, listFiltered: true)]))
        let batch = [Self.entry("1-0", [Self.edit("c1")])]
        let observed = planner.observations(batch, fetched: [AccountScoped(Self.account, "c1"): .success(fetched)])
        #expect(observed.observations.map(\.syncListID) == lists)
        #expect(observed.observations.map(\.kind) == [whole ? .fields(["title": "whole"], full: true) : .removed])
    }

    @Test func aThrottledReadHoldsBackTheAccountsLaterEntriesAndNoOneElses() {
        var context = Self.context()
        context.lists[AccountScoped("a2", "tl1")] = SyncListRecord(
            id: "sl9", accountID: "a2", name: "x", trelloBoardID: "board1", trelloListID: "tl1")
        let batch = [
            Self.entry("1-0", [Self.edit("c1")]), Self.entry("2-0", [Self.edit("c2")]), Self.entry("3-0", account: "a2", [Self.edit("c3")]),
        ]
        let fetched: BatchPlanner.Fetched = [
            AccountScoped(Self.account, "c1"): .failure(TrelloFetchError(failure: .trelloThrottled, message: "429", wait: .seconds(3))),
            AccountScoped(Self.account, "c2"): .success(Self.card(in: "tl1")),
            AccountScoped("a2", "c3"): .success(Self.card(in: "tl1")),
        ]
        let observed = BatchPlanner(context: context).observations(batch, fetched: fetched)
        #expect(observed.retry.map { $0.id } == ["1-0", "2-0"])
        #expect(observed.retry.map { $0.error.failure } == [.trelloThrottled, .trelloThrottled])
        #expect(observed.throttled == ["1-0": .seconds(3), "2-0": .seconds(3)])
        #expect(observed.applied == ["3-0"])
    }

    @Test func aLaterEventOfACardWhoseReadFailedWaitsWithIt() {
        let planner = BatchPlanner(context: Self.context(tasks: ["c2": live]))
        let batch = [Self.entry("1-0", [Self.edit("c1")]), Self.entry("2-0", [Self.edit("c2")]), Self.entry("3-0", [Self.edit("c1")])]
        let fetched: BatchPlanner.Fetched = [AccountScoped(Self.account, "c1"): .failure(TrelloFetchError(failure: .trelloTransient, message: "503"))]
        let observed = planner.observations(batch, fetched: fetched)
        #expect(observed.applied == ["2-0"])
        #expect(observed.retry.map { $0.id } == ["1-0", "3-0"])
        #expect(observed.retry.last?.error.message == "an earlier event of the card failed: 503")
        #expect(observed.throttled.isEmpty)
    }
}
