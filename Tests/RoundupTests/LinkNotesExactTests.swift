import RoundupCore
import RoundupJobs
import Testing

/// What counts as a link the description holds already: a whole URL, never part of a longer one, and
/// a named link with its name; and Trello's 16,384-character limit on what links are appended.
@Suite struct LinkNotesExactTests {
    static let issue12 = LinkNotes.Link(url: "https://x.example/issue/12", name: "Issue 12 - original crash report")

    @Test func aURLCountsOnlyWholeOnItsOwnLineOrBetweenWhitespace() {
        let url = "https://x.example/issue/12"
        #expect(LinkNotes.containsLink(url, in: url))
        #expect(LinkNotes.containsLink(url, in: "See\n\(url)\nfor the report"))
        #expect(LinkNotes.containsLink(url, in: "see \(url) and\tmore"))
        #expect(LinkNotes.containsLink(url, in: "Issue 12: \(url)"))
        #expect(LinkNotes.containsLink(url, in: "first https://x.example/issue/123, then \(url)"), "a whole one after a longer one")
        #expect(!LinkNotes.containsLink(url, in: "Regression of https://x.example/issue/123"), "part of a longer URL")
        #expect(!LinkNotes.containsLink(url, in: "https://x.example/issue/12/comments"))
        #expect(!LinkNotes.containsLink(url, in: "xhttps://x.example/issue/12"))
        #expect(!LinkNotes.containsLink(url, in: "(\(url))"))
        #expect(!LinkNotes.containsLink(url, in: "[\(url)](\(url))"))
        #expect(!LinkNotes.containsLink(url, in: "\(url)."))
        #expect(!LinkNotes.containsLink(url, in: ""))
        #expect(!LinkNotes.containsLink("", in: "anything at all"))
    }

    @Test func aNamedLinkIsHeldOnlyWithItsName() {
        let link = Self.issue12
        #expect(link.line == "Issue 12 - original crash report: https://x.example/issue/12")
        #expect(LinkNotes.holds(link, in: "Notes\n\nIssue 12 - original crash report: https://x.example/issue/12\nmore"))
        #expect(LinkNotes.holds(link, in: "  Issue 12 -  original crash report:\thttps://x.example/issue/12  "), "whitespace aside")
        #expect(!LinkNotes.holds(link, in: "See https://x.example/issue/12"), "the URL without its name would lose the name")
        #expect(!LinkNotes.holds(link, in: "Issue 12 - original crash report: https://x.example/issue/123"))
        // A link without a name of its own (Trello names a link after its URL) is held by its URL alone.
        let bare = LinkNotes.Link(url: "https://e.example/a", name: "https://e.example/a")
        #expect(LinkNotes.holds(bare, in: "see https://e.example/a"))
        #expect(!LinkNotes.holds(bare, in: "see https://e.example/ab"))
        // A name over several lines is written on one, and found there again.
        let multiline = LinkNotes.Link(url: "https://e.example/b", name: "Two\nlines ")
        #expect(multiline.line == "Two lines: https://e.example/b")
        #expect(LinkNotes.holds(multiline, in: LinkNotes.appending([multiline], to: "notes")))
    }

    @Test func theIssue12LinkIsAppendedBesideIssue123AndBesideItsBareURL() {
        let longer = "Regression of https://x.example/issue/123"
        #expect(LinkNotes.appending([Self.issue12], to: longer) == longer + "\n\nIssue 12 - original crash report: https://x.example/issue/12")
        let bare = "See https://x.example/issue/12"
        #expect(LinkNotes.appending([Self.issue12], to: bare) == bare + "\n\nIssue 12 - original crash report: https://x.example/issue/12")
        // Written once: appending again adds nothing.
        let once = LinkNotes.appending([Self.issue12], to: longer)
        #expect(LinkNotes.appending([Self.issue12, Self.issue12], to: once) == once)
    }

    @Test func linksThatWouldTakeTheDescriptionOverTrellosLimitAreLeftOut() {
        let limit = LinkNotes.descriptionLimit
        #expect(limit == 16_384)
        let one = LinkNotes.Link(url: "https://e.co/1", name: "One")
        let big = LinkNotes.Link(url: "https://example.com/a-link-far-too-long-for-what-is-left", name: "Too long")
        let small = LinkNotes.Link(url: "https://e.co/3")
        let notes = String(repeating: "a", count: limit - 40)
        let placed = LinkNotes.placing([one, big, small], in: notes)
        #expect(
            placed.notes == notes + "\n\nOne: https://e.co/1\nhttps://e.co/3", "the ones that fit, in order; the next tried after one that does not")
        #expect(LinkNotes.length(placed.notes) == limit - 4)
        #expect(placed.held == [one, small])
        #expect(placed.left == [big])

        // Up to the limit exactly; not a character over.
        let exact = String(repeating: "b", count: limit - 16)
        #expect(LinkNotes.placing([small], in: exact).notes == exact + "\n\nhttps://e.co/3")
        let over = String(repeating: "b", count: limit - 15)
        let refused = LinkNotes.placing([small], in: over)
        #expect(refused.notes == over && refused.held.isEmpty && refused.left == [small])
        // A link held already needs no room.
        let full = String(repeating: "c", count: limit - 15) + " https://e.co/3"
        let heldAlready = LinkNotes.placing([small], in: full)
        #expect(heldAlready.notes == full && heldAlready.held == [small] && heldAlready.left.isEmpty)
        // Counted as Trello counts: UTF-16 code units (an emoji is two).
        #expect(LinkNotes.length("🙂") == 2 && LinkNotes.length("é") == 1)
        let emoji = String(repeating: "🙂", count: (limit - 16) / 2)
        #expect(LinkNotes.placing([small], in: emoji).notes == emoji + "\n\nhttps://e.co/3")
        #expect(LinkNotes.placing([small], in: emoji + "🙂").left == [small])
        // Without a limit (the sync path, which checks the length itself) everything goes in.
        #expect(LinkNotes.appending([small], to: over) == over + "\n\nhttps://e.co/3")
    }
}
