/* The course site's MathJax settings, served as [MathJax]/config/site.js and loaded after
 * MathJax's combined configuration (MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe,site).
 *
 * The copy of MathJax 2 that the site serves (jupyter-server-mathjax's) holds one set of fonts,
 * STIX-Web. MathJax's default is the TeX fonts, whose tables (HTML-CSS/fonts/TeX/fontdata.js)
 * and font files that copy lacks: every formula then falls back to the reader's own fonts, and
 * a formula with a prime (x', f'(x)) fails with "[Math Processing Error]", since MathJax draws
 * the prime from a variant that only the fonts' tables define.
 *   - HTML-CSS draws with the STIX-Web web fonts, never with fonts installed on the reader's
 *     machine (availableFonts: []), which would need their own tables too;
 *   - the context menu offers no other renderer: the copy serves HTML-CSS only;
 *   - the hidden MathML copy of each formula, for screen readers (AssistiveMML), keeps the
 *     page's font: MathJax's MathML styles would give its \mathbb and \mathcal letters the
 *     TeX web fonts, which the copy lacks (a 404 for MathJax_AMS-Regular.otf). */
MathJax.Hub.Config({
  "HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null},
  MathMenu: {showRenderer: false},
  styles: {".MJX_Assistive_MathML [mathvariant]": {"font-family": "inherit !important"}}
});
MathJax.Ajax.loadComplete("[MathJax]/config/site.js");
