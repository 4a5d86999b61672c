// The renderer lives with the components, which both targets share (components/host/render.ts).
export { renderHostConfig } from "../../components/host/render.js";
