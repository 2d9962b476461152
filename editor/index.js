// Berth editor bundle: CodeMirror 6 exposed as window.BerthEditor.
// Build with `npm run build` (see README.md); output is static/vendor/editor.js.
import { basicSetup } from "codemirror";
import { Compartment, EditorState, Prec } from "@codemirror/state";
import { EditorView, keymap } from "@codemirror/view";
import { indentWithTab } from "@codemirror/commands";
import { HighlightStyle, StreamLanguage, indentUnit, syntaxHighlighting } from "@codemirror/language";
import { tags } from "@lezer/highlight";
import { python } from "@codemirror/lang-python";
import { javascript } from "@codemirror/lang-javascript";
import { html } from "@codemirror/lang-html";
import { css } from "@codemirror/lang-css";
import { json } from "@codemirror/lang-json";
import { markdown } from "@codemirror/lang-markdown";
import { toml } from "@codemirror/legacy-modes/mode/toml";

function extensionOf(path) {
  const name = String(path || "").split(/[\\/]/).pop().toLowerCase();
  const dot = name.lastIndexOf(".");
  return dot > 0 ? name.slice(dot + 1) : "";
}

function languageFor(path) {
  switch (extensionOf(path)) {
    case "py":
      return [python(), indentUnit.of("    ")];
    case "js":
    case "mjs":
    case "cjs":
      return javascript();
    case "jsx":
      return javascript({ jsx: true });
    case "ts":
      return javascript({ typescript: true });
    case "tsx":
      return javascript({ jsx: true, typescript: true });
    case "html":
    case "htm":
      return html();
    case "css":
      return css();
    case "json":
      return json();
    case "md":
    case "markdown":
      return markdown();
    case "toml":
      return StreamLanguage.define(toml);
    default:
      return [];
  }
}

// CodeMirror's default colours, each darkened where it fell under WCAG AA (4.5:1) on
// white: escapes and regexps (#e40), types (#085), invalid text (#f00).
const berthHighlight = HighlightStyle.define([
  { tag: tags.meta, color: "#404740" },
  { tag: tags.link, textDecoration: "underline" },
  { tag: tags.heading, textDecoration: "underline", fontWeight: "bold" },
  { tag: tags.emphasis, fontStyle: "italic" },
  { tag: tags.strong, fontWeight: "bold" },
  { tag: tags.strikethrough, textDecoration: "line-through" },
  { tag: tags.keyword, color: "#708" },
  { tag: [tags.atom, tags.bool, tags.url, tags.contentSeparator, tags.labelName], color: "#219" },
  { tag: [tags.literal, tags.inserted], color: "#164" },
  { tag: [tags.string, tags.deleted], color: "#a11" },
  { tag: [tags.regexp, tags.escape, tags.special(tags.string)], color: "#b02e00" },
  { tag: tags.definition(tags.variableName), color: "#00f" },
  { tag: tags.local(tags.variableName), color: "#30a" },
  { tag: [tags.typeName, tags.namespace], color: "#06703f" },
  { tag: tags.className, color: "#167" },
  { tag: [tags.special(tags.variableName), tags.macroName], color: "#256" },
  { tag: tags.definition(tags.propertyName), color: "#00c" },
  { tag: tags.comment, color: "#940" },
  { tag: tags.invalid, color: "#c00" },
]);

const berthTheme = EditorView.theme(
  {
    "&": {
      height: "100%",
      backgroundColor: "#fff",
      color: "#1f2328",
      fontSize: "13px",
    },
    ".cm-scroller": {
      overflow: "auto",
      fontFamily:
        'ui-monospace, SFMono-Regular, "SF Mono", Menlo, Consolas, "Liberation Mono", monospace',
      lineHeight: "1.5",
    },
    ".cm-gutters": {
      backgroundColor: "#f6f8fa",
      color: "#57606a", // line numbers at AA contrast on the gutter
      borderRight: "1px solid #d0d7de",
    },
    ".cm-activeLine": { backgroundColor: "#f6f8fa80" },
    ".cm-activeLineGutter": { backgroundColor: "#eaeef2", color: "#1f2328" },
    "&.cm-focused": { outline: "none" },
  },
  { dark: false }
);

// The dark scheme (the system's prefers-color-scheme): every colour at AA (4.5:1) on
// the editor's background #161b22 (Berth's dark surface), line numbers on the gutter.
const berthDarkHighlight = HighlightStyle.define([
  { tag: tags.meta, color: "#b4bec9" },
  { tag: tags.link, textDecoration: "underline" },
  { tag: tags.heading, textDecoration: "underline", fontWeight: "bold" },
  { tag: tags.emphasis, fontStyle: "italic" },
  { tag: tags.strong, fontWeight: "bold" },
  { tag: tags.strikethrough, textDecoration: "line-through" },
  { tag: tags.keyword, color: "#ff9ad5" },
  { tag: [tags.atom, tags.bool, tags.url, tags.contentSeparator, tags.labelName], color: "#9cccff" },
  { tag: [tags.literal, tags.inserted], color: "#7ee2a8" },
  { tag: [tags.string, tags.deleted], color: "#ffb08a" },
  { tag: [tags.regexp, tags.escape, tags.special(tags.string)], color: "#ffc66d" },
  { tag: tags.definition(tags.variableName), color: "#8fd3ff" },
  { tag: tags.local(tags.variableName), color: "#c8b6ff" },
  { tag: [tags.typeName, tags.namespace], color: "#6fdfb8" },
  { tag: tags.className, color: "#7fe0e0" },
  { tag: [tags.special(tags.variableName), tags.macroName], color: "#a5d6ff" },
  { tag: tags.definition(tags.propertyName), color: "#a5c8ff" },
  { tag: tags.comment, color: "#a8b1bb", fontStyle: "italic" },
  { tag: tags.invalid, color: "#ff8e85" },
]);

const berthDarkTheme = EditorView.theme(
  {
    "&": {
      height: "100%",
      backgroundColor: "#161b22",
      color: "#e6edf3",
      fontSize: "13px",
    },
    ".cm-scroller": {
      overflow: "auto",
      fontFamily:
        'ui-monospace, SFMono-Regular, "SF Mono", Menlo, Consolas, "Liberation Mono", monospace',
      lineHeight: "1.5",
    },
    ".cm-content": { caretColor: "#e6edf3" },
    ".cm-cursor, .cm-dropCursor": { borderLeftColor: "#e6edf3" },
    "&.cm-focused > .cm-scroller > .cm-selectionLayer .cm-selectionBackground, .cm-selectionBackground, ::selection":
      { backgroundColor: "#264f78" },
    ".cm-gutters": {
      backgroundColor: "#1c2128",
      color: "#9ba5b0",
      borderRight: "1px solid #3a424c",
    },
    ".cm-activeLine": { backgroundColor: "#ffffff0a" },
    ".cm-activeLineGutter": { backgroundColor: "#262c36", color: "#e6edf3" },
    ".cm-panels": { backgroundColor: "#1c2128", color: "#e6edf3" },
    ".cm-tooltip": { backgroundColor: "#1c2128", color: "#e6edf3", border: "1px solid #3a424c" },
    ".cm-selectionMatch": { backgroundColor: "#3a4a5e" },
    ".cm-matchingBracket, &.cm-focused .cm-matchingBracket": { backgroundColor: "#2e4a3a", outline: "1px solid #5fd06e80" },
    ".cm-searchMatch": { backgroundColor: "#5a4a1a", outline: "1px solid #e3b341" },
    "&.cm-focused": { outline: "none" },
  },
  { dark: true }
);

// Light or dark as the system says, and again whenever it changes (a Compartment each
// editor reconfigures).
const darkQuery = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
function lookFor(dark) {
  return dark
    ? [berthDarkTheme, syntaxHighlighting(berthDarkHighlight)]
    : [berthTheme, syntaxHighlighting(berthHighlight)];
}

function create(parent, options) {
  const opts = options || {};
  const initial = String(opts.doc == null ? "" : opts.doc);
  let savedDoc = null; // Text of the last saved state (set once the view exists)
  let dirty = false;
  const look = new Compartment();

  function refreshDirty(doc) {
    const now = !doc.eq(savedDoc);
    if (now !== dirty) {
      dirty = now;
      if (typeof opts.onChange === "function") opts.onChange(dirty);
    }
  }

  const saveKeymap = Prec.highest(
    keymap.of([
      {
        key: "Mod-s",
        preventDefault: true,
        run: (view) => {
          if (typeof opts.onSave === "function") opts.onSave(view.state.doc.toString());
          return true;
        },
      },
    ])
  );

  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: initial,
      extensions: [
        saveKeymap,
        basicSetup,
        keymap.of([indentWithTab]),
        languageFor(opts.path),
        look.of(lookFor(darkQuery ? darkQuery.matches : false)),
        EditorState.readOnly.of(!!opts.readOnly),
        // Screen readers name the text box by its file.
        EditorView.contentAttributes.of({ "aria-label": `Text of ${opts.path || "the file"}` }),
        EditorView.editable.of(!opts.readOnly),
        EditorView.updateListener.of((update) => {
          if (!update.docChanged) return;
          refreshDirty(update.state.doc);
          // Every change (typed, pasted, undone, set): the page keeps unsaved text.
          if (typeof opts.onDocChange === "function") opts.onDocChange();
        }),
      ],
    }),
  });

  savedDoc = view.state.doc;
  // Its scrolling area takes the keyboard too (a read-only file has nothing else to focus).
  view.scrollDOM.tabIndex = 0;
  const onScheme = (event) => view.dispatch({ effects: look.reconfigure(lookFor(event.matches)) });
  if (darkQuery) darkQuery.addEventListener("change", onScheme);

  return {
    view,
    getText() {
      return view.state.doc.toString();
    },
    setText(text) {
      view.dispatch({
        changes: { from: 0, to: view.state.doc.length, insert: String(text == null ? "" : text) },
      });
    },
    markSaved() {
      savedDoc = view.state.doc;
      refreshDirty(savedDoc);
    },
    isDirty() {
      return dirty;
    },
    focus() {
      view.focus();
    },
    destroy() {
      if (darkQuery) darkQuery.removeEventListener("change", onScheme);
      view.destroy();
    },
  };
}

window.BerthEditor = { create };
