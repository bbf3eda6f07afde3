import Foundation
public import RoundupCore

/// Links written into a card's description instead of kept as link attachments (a list's `move_links_to_notes`, and the
/// `migrate_links` job). A link goes in once: one whose URL the description already holds is not appended again, so a
/// job run twice, or resumed after a card's description was written but before its attachments were deleted, writes
/// nothing twice.
public enum LinkNotes {
    public struct Link: Sendable, Hashable {
        public var url: String
        /// Shown before the URL when it says something the URL does not (Trello names a link after its URL by default).
        public var name: String?

        public init(url: String, name: String? = nil) {
            self.url = url
            self.name = name
        }

        /// The link's line: `name: url`, or the URL alone.
        var line: String {
            guard let name = name?.trimmingCharacters(in: .whitespacesAndNewlines), !name.isEmpty, name != url else { return url }
            return "\(name): \(url)"
        }
    }

    /// `notes` with a line for each link it does not hold yet, after a blank line (one link per line).
    public static func appending(_ links: [Link], to notes: String) -> String {
        var lines: [String] = []
        var seen = Set<String>()
        for link in links where !link.url.isEmpty && !notes.contains(link.url) && seen.insert(link.url).inserted {
            lines.append(link.line)
        }
        guard !lines.isEmpty else { return notes }
        let trimmed = notes.replacingTrailingNewlines()
        return trimmed.isEmpty ? lines.joined(separator: "\n") : trimmed + "\n\n" + lines.joined(separator: "\n")
    }

    /// A card's link attachments (uploads are files, not links), in the card's order.
    public static func links(ofCard card: [String: JSONValue]) -> [(id: String, link: Link)] {
        (card["attachments"]?.arrayValue ?? []).compactMap { attachment in
            guard attachment["isUpload"]?.boolValue != true, let id = attachment["id"]?.stringValue, let url = attachment["url"]?.stringValue,
                !url.isEmpty
            else { return nil }
            return (id, Link(url: url, name: attachment["name"]?.stringValue))
        }
    }
}

extension String {
    fileprivate func replacingTrailingNewlines() -> String {
        var text = Substring(self)
        while let last = text.last, last.isNewline || last == " " { text = text.dropLast() }
        return String(text)
    }
}
